#!/usr/bin/env bash
# Call D (after B and C, where device time is left):
# 1. Q6_K's 8-token tensor-core kernel and one-token int16-x GEMV on 16-byte aligned quants
#    (q6k_split.diff, q6k_split_cost.py: the same bytes, each row's quant parts before its scale
#    parts) against gguf's layout;
# 2. ncu on the 8-token Q6_K down kernel: is it bound by its 2-byte loads, as the Q4_K one was by
#    its scale loads?
# 3. the words form's configs ranked at 32 tokens (`mma_sweep --stage1-tokens 32`, Q4_K and Q6_K,
#    16 and 32 tokens in stage 2), then the random-weight 16 / 32 x 2K rows with the sweep's picks
#    (KVSPILL_MMA_CONFIGS) against the table, alternated: whether the 32-sequence step (1.51x
#    llama-batched-bench at the last estimate, bar 2x) has a faster config than the table's.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callD.log
{ date -u; git log --oneline | head -1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
S=bench/results/2026-12-04-h200-scale-pairs/scripts
timeout 90 python3 $S/q6k_split_cost.py head >> $OUT/q6k_split.jsonl 2>&1
echo "q6k_split head rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/q6k_split.jsonl | cut -c1-300)" | tee -a $L
git apply $S/q6k_split.diff && timeout 150 python3 $S/q6k_split_cost.py split >> $OUT/q6k_split.jsonl 2>&1
echo "q6k_split split rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/q6k_split.jsonl | cut -c1-300)" | tee -a $L
git apply -R $S/q6k_split.diff
timeout 150 ncu --target-processes all -k regex:_q6k_mma_kernel --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
  --section MemoryWorkloadAnalysis --section LaunchStats --section SourceCounters \
  python3 $S/q6k_one_call.py > $OUT/ncu_q6k_down.txt 2>&1
echo "ncu q6k rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'L1/TEX Cache Throughput|Memory Throughput|DRAM Throughput' $OUT/ncu_q6k_down.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $L
timeout 220 python3 -m kvspill.bench.mma_sweep --types Q4_K Q6_K --forms words --stage1-tokens 32 --tokens 16 32 \
  --budget-s 180 --out $OUT/sweep32 2>&1 | grep -v "^precompiled" | tail -8 | tee -a $L
P="python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048"
run() {  # run NAME ARGS...
  local name=$1; shift
  timeout 90 "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step' $OUT/$name.txt | tr -s ' ' | cut -c1-200)" | tee -a $L
}
for c in 32 16; do
  run c${c}_table $P --concurrency $c
  [ -s $OUT/sweep32/mma_configs.json ] && run c${c}_picks env KVSPILL_MMA_CONFIGS=$OUT/sweep32/mma_configs.json $P --concurrency $c
  run c${c}_table2 $P --concurrency $c
done
(cd $OUT && tar czf allD.tgz c*.txt sweep32 && rm -rf c*.txt sweep32/stage*.jsonl)
echo "call D done at $(( $(date +%s) - T0 )) s" | tee -a $L
