#!/usr/bin/env bash
# Call D (after B and C, where device time is left):
# 1. Q6_K's split layout (KVSPILL_Q6K_SPLIT, kernels/gguf_formats.split_q6k_rows: the same bytes,
#    each row's quants before its scales, the quants 16-byte aligned): the 8-token tensor-core
#    kernel and the one-token int16-x GEMV on the 8B's Q6_K shapes in both layouts
#    (q6k_split_cost.py), then the engine's 8K batch-1 and 8 x 2K rows with it on and off, alternated;
# 2. ncu on the 8-token Q6_K down kernel (gguf's layout): bound by its 2-byte loads?
# (The 32-token sweep is call E.)
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh callD
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_q6k_split.py > $OUT/pytest_split.txt 2>&1
echo "pytest split rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest_split.txt)" | tee -a $L
timeout 150 python3 $S/q6k_split_cost.py both >> $OUT/q6k_split.jsonl 2>&1
echo "q6k_split rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/q6k_split.jsonl | cut -c1-400)" | tee -a $L
P8K="python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192"
P2K="python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency 8"
for v in 1 0 1; do  # the engine with the Q6_K weights split (KVSPILL_Q6K_SPLIT=1) and not, alternated
  for row in 8k 8x2k; do
    [ $row = 8k ] && cmd=$P8K || cmd=$P2K
    timeout 90 env KVSPILL_Q6K_SPLIT=$v $cmd > $OUT/split${v}_$row.txt 2>&1
    echo "split=$v $row rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step' $OUT/split${v}_$row.txt | tr -s ' ' | cut -c1-160)" | tee -a $L
  done
done
timeout 150 ncu --target-processes all -k regex:_q6k_mma_kernel --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
  --section MemoryWorkloadAnalysis --section LaunchStats --section SourceCounters \
  python3 $S/q6k_one_call.py > $OUT/ncu_q6k_down.txt 2>&1
echo "ncu q6k rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'L1/TEX Cache Throughput|Memory Throughput|DRAM Throughput' $OUT/ncu_q6k_down.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $L
(cd $OUT && tar czf allD.tgz split*.txt && rm -f split*.txt)
echo "call D done at $(( $(date +%s) - T0 )) s" | tee -a $L
