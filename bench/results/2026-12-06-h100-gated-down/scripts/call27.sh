#!/usr/bin/env bash
# Call 27 (prepared 2026-12-06 02:05 UTC): the gated down projection (KVSPILL_GATED_WORDS=1: the SiLU
# applied in the words form's x permutation, one launch a layer less at 2-64 tokens) against the
# SiLU kernel then the permutation, random llama-8b:q4_k_m at 8 / 16 / 32 x 2K, alternated; its GPU
# tests first (bit-equal permutation, same greedy tokens).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call27
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_gguf_mma.py tests/engine/test_gpu.py -k "gated" > $OUT/pytest27.txt 2>&1
echo "pytest rc $?: $(tail -1 $OUT/pytest27.txt)" | tee -a $L
prof() {  # name, GATED value, seqs
  left ${LIMIT:-540} || { echo "$1 skipped (time)" | tee -a $L; return; }
  timeout 60 env KVSPILL_GATED_WORDS=$2 python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency $3 > $OUT/$1.txt 2>&1
  echo "$1 rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$1.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-160)" | tee -a $L
}
for r in a b; do
  prof c8_off_$r 0 8; prof c8_on_$r 1 8
  prof c32_off_$r 0 32; prof c32_on_$r 1 32
done
prof c16_off 0 16; prof c16_on 1 16
prof c4_off 0 4; prof c4_on 1 4
(cd $OUT && tar czf all27.tgz *.txt && rm -f *.txt)
echo "call 27 done at $(( $(date +%s) - T0 )) s" | tee -a $L
