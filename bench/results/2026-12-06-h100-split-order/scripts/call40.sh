#!/usr/bin/env bash
# Call 40 (prepared 2026-12-06 07:05 UTC). On an H200: call 38's H200 branch (the split order A/B,
# then call 30's issue-54 rows with llama.cpp). On an H100: 32-token tensor-core configs through
# KVSPILL_MMA_CONFIGS on the random llama-8b:q4_k_m at 32 x 2K, alternated with the table's: Q6_K
# (whose down and v ran at 0.95 TB/s of DRAM under ncu, call 36: 512 and 128 programs of two warps)
# split in 16 / 32, four warps, 128-row tiles; Q4_K's o / qkv / down split twice as deep.
set -u
S40=bench/results/2026-12-06-h100-split-order/scripts
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && exec bash $S40/call38.sh
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call40
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
B="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency"
prof c32_table 200 X=1 -- $B 32
for v in q6_s16 q6_s32 q6_w4 q6_b128 q4_s16; do prof c32_$v 200 KVSPILL_MMA_CONFIGS=$S40/$v.json -- $B 32; done
prof c32_table_b 220 X=1 -- $B 32
(cd $OUT && tar czf all40.tgz *.txt && rm -f *.txt)
echo "call 40 done at $(( $(date +%s) - T0 )) s" | tee -a $L
