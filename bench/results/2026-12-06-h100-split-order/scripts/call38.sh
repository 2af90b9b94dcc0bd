#!/usr/bin/env bash
# Call 38 (prepared 2026-12-06 06:50 UTC). On an H200: the split-first grid against the row tiles
# first (618dbaf's kvspill/) at 8 and 32 x 2K, then call 30 (issue 54's rows with llama.cpp on the
# same file). On an H100: the GPU tests of the tensor-core kernel and the random Q4_K_M file (call
# 37's ran out of time), then decode attention's programs an SM (_PROGRAMS_PER_SM 4, the default,
# against 3 and 6) at batch 1 8K / 32K (8B Q4_K_M), W1 8K and 8 x 2K, alternated.
set -u
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader)
if echo "$GPU" | grep -q H200; then
  . bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call38
  . bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
  mkdir -p /tmp/old && git archive 618dbaf kvspill | tar x -C /tmp/old
  B="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency"
  for n in 32 8; do prof c${n}_old 100 PYTHONPATH=/tmp/site:/tmp/old -- $B $n; prof c${n}_new 100 X=1 -- $B $n; done
  bash bench/results/2026-12-06-h100-gated-down/scripts/call30.sh
  exit
fi
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call38
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/model/test_random_q4km.py tests/kernels/test_gguf_mma.py -k "q4km or split or words" > $OUT/pytest38.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest38.txt)" | tee -a $L
for p in 3 6; do
  mkdir -p /tmp/p$p && cp -r kvspill /tmp/p$p/
  sed -i "s/^_PROGRAMS_PER_SM = 4$/_PROGRAMS_PER_SM = $p/" /tmp/p$p/kvspill/kernels/decode_attention.py
  grep -q "^_PROGRAMS_PER_SM = $p$" /tmp/p$p/kvspill/kernels/decode_attention.py || echo "p$p: sed failed" | tee -a $L
done
Q="--shape llama-8b:q4_k_m --steps 100"
for row in "k8|$Q --kv-cache-memory 16GiB --ctx 8192" "k32|$Q --kv-cache-memory 16GiB --ctx 32768" \
           "w1|--shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192" "c8|$Q --kv-cache-memory 12GiB --ctx 2048 --concurrency 8"; do
  name=${row%%|*}; args=${row#*|}
  for p in 4 3 6 4; do
    if [ $p = 4 ]; then prof ${name}_p4_$(date +%s) 560 X=1 -- $args; else prof ${name}_p$p 560 PYTHONPATH=/tmp/site:/tmp/p$p -- $args; fi
  done
done
(cd $OUT && tar czf all38.tgz *.txt && rm -f *.txt)
echo "call 38 done at $(( $(date +%s) - T0 )) s" | tee -a $L
