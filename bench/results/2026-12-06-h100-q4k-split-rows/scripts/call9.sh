#!/usr/bin/env bash
# Call 9: the one-token Q4_K GEMV configs calls 6 and 8 found faster on the H100 (qkv (4096, 8, 2),
# o (4096, 4, 2)) against the table's, in the engine at 8K batch 1, alternated twice.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call9
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
mkdir -p /tmp/pc && cp -r kvspill /tmp/pc/
sed -i 's/    (4096, 5120, (4096, 16, 4)),/    (4096, 5120, (4096, 8, 2)),/; s/    (4096, 0, (4096, 8, 4)),/    (4096, 0, (4096, 4, 2)),/' /tmp/pc/kvspill/kernels/gguf_gemv.py
grep -n "(4096, 5120\|(4096, 0, " /tmp/pc/kvspill/kernels/gguf_gemv.py | head -3 | tee -a $L
for run in 1 2; do
  prof table_k8_$run 230 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192
  prof h100cfg_k8_$run 230 PYTHONPATH=/tmp/site:/tmp/pc -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192
done
echo "call 9 done at $(( $(date +%s) - T0 )) s" | tee -a $L
