#!/usr/bin/env bash
# Call 4: the one-token Q6_K GEMV in the split layout (1.5-2% slower at batch 1 in calls 1 and 3):
# its configs swept split (split_gemv_sweep.py), then the engine's 8K batch-1 row with the split
# weights on the sweep's picks (prof_split_picks.py) against gguf's layout and the table, alternated.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call4
N=bench/results/2026-12-05-h200-q6k-split/scripts
timeout 110 python3 $N/split_gemv_sweep.py $OUT 2>&1 | tail -6 | tee -a $L
cat $OUT/split_picks.json | tee -a $L; echo | tee -a $L
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192"
for run in split0 picks; do
  case $run in
    split0*) cmd="env KVSPILL_Q6K_SPLIT=0 python3 -m kvspill.bench.profile_decode $A" ;;
    picks*) cmd="env KVSPILL_Q6K_SPLIT=1 SPLIT_PICKS=$OUT/split_picks.json python3 $N/prof_split_picks.py $A" ;;
    table) cmd="env KVSPILL_Q6K_SPLIT=1 python3 -m kvspill.bench.profile_decode $A" ;;
  esac
  timeout 40 $cmd > $OUT/$run.txt 2>&1
  echo "$run rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step' $OUT/$run.txt | tr -s ' ')" | tee -a $L
done
(cd $OUT && tar czf all4.tgz split0*.txt picks*.txt && rm -f split0*.txt picks*.txt)
echo "call 4 done at $(( $(date +%s) - T0 )) s" | tee -a $L
