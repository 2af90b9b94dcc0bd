#!/usr/bin/env bash
# Call 29 (prepared 2026-12-06 01:55 UTC): the landed defaults unset (gated down projection, Q4_K
# lane passes at 2 tokens, three attention stages from 32 sequences) on an H100: random
# llama-8b:q4_k_m at 1 / 2 / 8 / 32 x 2K and 8K batch 1, with KVSPILL_GATED_WORDS=0 beside 8 and 32;
# then the GPU tests of the changed paths.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call29
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
prof() {  # name, env..., -- profile_decode args
  local name=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  left ${LIMIT:-400} || { echo "$name skipped (time)" | tee -a $L; return; }
  timeout 60 env "${envs[@]}" python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --steps 100 "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-160)" | tee -a $L
}
B="--kv-cache-memory 12GiB --ctx 2048 --concurrency"
prof k8 X=1 -- --kv-cache-memory 16GiB --ctx 8192
for n in 1 2 8 32; do prof c$n X=1 -- $B $n; done
prof c8_gated0 KVSPILL_GATED_WORDS=0 -- $B 8
prof c32_gated0 KVSPILL_GATED_WORDS=0 -- $B 32
prof c8_b X=1 -- $B 8
prof c32_b X=1 -- $B 32
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_attention.py tests/kernels/test_gguf_mma.py tests/engine/test_gpu.py tests/model/test_random_q4km.py -k "gated or decode or words or q4km or lane" > $OUT/pytest29.txt 2>&1
echo "pytest rc $?: $(tail -1 $OUT/pytest29.txt)" | tee -a $L
(cd $OUT && tar czf all29.tgz *.txt && rm -f *.txt)
echo "call 29 done at $(( $(date +%s) - T0 )) s" | tee -a $L
