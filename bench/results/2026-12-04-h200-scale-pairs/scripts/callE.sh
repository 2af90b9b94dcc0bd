#!/usr/bin/env bash
# Call E (last, where device time is left): the words form's configs ranked at 32 tokens
# (`mma_sweep --stage1-tokens 32`, Q4_K and Q6_K, 16 and 32 tokens in stage 2), then the
# random-weight 32 x 2K row with the sweep's picks (KVSPILL_MMA_CONFIGS) against the table,
# alternated: whether the 32-sequence step (1.51x llama-batched-bench at the last estimate, bar 2x)
# has a faster config than the table's, ranked at 8 tokens.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh callE
timeout 220 python3 -m kvspill.bench.mma_sweep --types Q4_K Q6_K --forms words --stage1-tokens 32 --tokens 16 32 \
  --budget-s 180 --out $OUT/sweep32 2>&1 | grep -v "^precompiled" | tail -8 | tee -a $L
P="python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048"
run() {  # run NAME ARGS...
  local name=$1; shift
  timeout 90 "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step' $OUT/$name.txt | tr -s ' ' | cut -c1-200)" | tee -a $L
}
run c32_table $P --concurrency 32
[ -s $OUT/sweep32/mma_configs.json ] && run c32_picks env KVSPILL_MMA_CONFIGS=$OUT/sweep32/mma_configs.json $P --concurrency 32
run c32_table2 $P --concurrency 32
(cd $OUT && tar czf allE.tgz c*.txt sweep32 && rm -rf c*.txt sweep32/stage*.jsonl)
echo "call E done at $(( $(date +%s) - T0 )) s" | tee -a $L
