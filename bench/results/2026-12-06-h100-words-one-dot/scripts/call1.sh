#!/usr/bin/env bash
# Call 1: the words form with one dot a super-block (Q4_K, one_dot_patch.py q4 at /tmp/od4) or a
# half (Q6_K, q6 at /tmp/od6) against today's: kernels at 4-32 tokens (sweep_words.py, alternated
# twice), then the engine at 8 / 32 x 2K with the Q4_K change, alternated twice.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call1
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
R=bench/results/2026-12-06-h100-words-one-dot/scripts
for t in 4 6; do mkdir -p /tmp/od$t && cp -r kvspill /tmp/od$t/ && python3 $R/one_dot_patch.py /tmp/od$t q$t | tee -a $L; done
for run in 1 2; do
  timeout 90 python3 $R/sweep_words.py today >> $OUT/words.jsonl 2>>$OUT/words.err
  TYPES=Q4_K PYTHONPATH=/tmp/site:/tmp/od4 timeout 60 python3 $R/sweep_words.py one_dot >> $OUT/words.jsonl 2>>$OUT/words.err
  TYPES=Q6_K PYTHONPATH=/tmp/site:/tmp/od6 timeout 60 python3 $R/sweep_words.py one_dot >> $OUT/words.jsonl 2>>$OUT/words.err
  echo "sweep $run at $(( $(date +%s) - T0 )) s" | tee -a $L
done
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048"
for run in 1 2; do
  for n in 8 32; do
    prof today_${n}_$run 540 PYTHONPATH=/tmp/site:$PWD -- $A --concurrency $n
    prof one_dot_${n}_$run 540 PYTHONPATH=/tmp/site:/tmp/od4 -- $A --concurrency $n
  done
done
echo "call 1 done at $(( $(date +%s) - T0 )) s" | tee -a $L
