#!/usr/bin/env bash
# Call 6: call 5 trimmed to one 600 s call, most important first (device time was short):
# the engine's 8K batch-1 row in gguf's layout, split (the split configs since call 4) and split
# with the scale-parts prefetch (scale_prefetch.diff), alternated twice; then, with what time is
# left, the split kernels' one-token times with and without the prefetch, and the kernel tables
# of 32 x 2K split, W1 8K and the 8B fp8 8K. Left out of call 5: kv_prefetch.diff and attn_splits.py.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call6
N=bench/results/2026-12-05-h200-q6k-split/scripts
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192"
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
for run in split0 split1 prefetch split0b split1b prefetchb; do
  left 470 || { echo "$run skipped (time)" | tee -a $L; continue; }
  case $run in prefetch*) git apply $N/scale_prefetch.diff; v=1 ;; split0*) v=0 ;; split1*) v=1 ;; esac
  timeout 90 env KVSPILL_Q6K_SPLIT=$v python3 -m kvspill.bench.profile_decode $A > $OUT/$run.txt 2>&1
  echo "$run rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step' $OUT/$run.txt | tr -s ' ')" | tee -a $L
  case $run in prefetch*) git apply -R $N/scale_prefetch.diff ;; esac
done
left 500 && timeout 60 python3 $S/q6k_split_cost.py split >> $OUT/q6k_split.jsonl 2>&1
left 520 && { git apply $N/scale_prefetch.diff; timeout 60 python3 $S/q6k_split_cost.py prefetch >> $OUT/q6k_split.jsonl 2>&1; git apply -R $N/scale_prefetch.diff; }
for t in "c32 1 --shape llama-8b:q4_k_m --ctx 2048 --concurrency 32 --kv-cache-memory 16GiB" \
         "w1 0 --shape llama-1b --ctx 8192 --kv-cache-memory 16GiB" \
         "fp8 0 --shape llama-8b:fp8 --ctx 8192 --kv-cache-memory 16GiB"; do
  set -- $t; name=$1; v=$2; shift 2
  left 530 || { echo "k_$name skipped (time)" | tee -a $L; continue; }
  timeout 60 env KVSPILL_Q6K_SPLIT=$v python3 -m kvspill.bench.profile_decode "$@" --steps 60 --kernels 5 > $OUT/k_$name.txt 2>&1
  echo "k_$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step' $OUT/k_$name.txt | tr -s ' ')" | tee -a $L
done
grep -o '"[a-z_ ]*1 token": [0-9.]*' $OUT/q6k_split.jsonl 2>/dev/null | tee -a $L
(cd $OUT && tar czf all6.tgz *.txt && rm -f *.txt)
echo "call 6 done at $(( $(date +%s) - T0 )) s" | tee -a $L
