#!/usr/bin/env bash
# Call 31 (prepared 2026-12-06 04:25 UTC for a machine with little device time left): the newest
# defaults' random-shape rows on whichever card comes, no llama.cpp file: 8K batch 1, 1 and 8 x 2K,
# 8B fp8 / bf16 at 8K, W1 at 8K (call 30's first rows).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call31
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
Q="--shape llama-8b:q4_k_m --steps 100"
prof k8 ${LIMIT:-240} X=1 -- $Q --kv-cache-memory 16GiB --ctx 8192
for n in 1 8; do prof c$n ${LIMIT:-240} X=1 -- $Q --kv-cache-memory 12GiB --ctx 2048 --concurrency $n; done
prof fp8_8k ${LIMIT:-240} X=1 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
prof bf16_8k ${LIMIT:-240} X=1 -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
prof w1 ${LIMIT:-240} X=1 -- --shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192
(cd $OUT && tar czf all31.tgz *.txt && rm -f *.txt)
echo "call 31 done at $(( $(date +%s) - T0 )) s" | tee -a $L
