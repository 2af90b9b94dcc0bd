#!/usr/bin/env bash
# Call 2: call 1 again with the tree copies really imported (prof_tree.sh: PYTHONSAFEPATH=1) and the
# outputs tarred ($OUT keeps few files): the words form's one dot (Q4_K /tmp/od4, Q6_K /tmp/od6)
# as kernels, then Q4_K's in the engine at 8 / 32 x 2K; then decode attention's splits and
# stage-1 config at 8 x 2K (../../2026-12-06-h100-attn-8seq/scripts/attn_env_patch.py, /tmp/ae).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call2
R=bench/results/2026-12-06-h100-words-one-dot/scripts
. $R/prof_tree.sh
for t in 4 6; do mkdir -p /tmp/od$t && cp -r kvspill /tmp/od$t/ && python3 $R/one_dot_patch.py /tmp/od$t q$t | tee -a $L; done
mkdir -p /tmp/ae && cp -r kvspill /tmp/ae/ && python3 bench/results/2026-12-06-h100-attn-8seq/scripts/attn_env_patch.py /tmp/ae | tee -a $L
which_tree today PYTHONPATH=/tmp/site:$PWD
which_tree od4 PYTHONPATH=/tmp/site:/tmp/od4
which_tree ae PYTHONPATH=/tmp/site:/tmp/ae
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs
timeout 90 python3 $R/sweep_words.py today >> $OUT/words.jsonl 2>>$OUT/words.err
TYPES=Q4_K PYTHONPATH=/tmp/site:/tmp/od4 timeout 60 python3 $R/sweep_words.py one_dot >> $OUT/words.jsonl 2>>$OUT/words.err
TYPES=Q6_K PYTHONPATH=/tmp/site:/tmp/od6 timeout 60 python3 $R/sweep_words.py one_dot >> $OUT/words.jsonl 2>>$OUT/words.err
echo "sweep at $(( $(date +%s) - T0 )) s" | tee -a $L
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency"
for run in 1 2; do
  for n in 8 32; do
    prof today_${n}_$run 500 PYTHONPATH=/tmp/site:$PWD -- $A $n
    prof one_dot_${n}_$run 500 PYTHONPATH=/tmp/site:/tmp/od4 -- $A $n
  done
done
P=PYTHONPATH=/tmp/site:/tmp/ae
for run in 1 2; do
  prof base_$run 560 PYTHONPATH=/tmp/site:$PWD -- $A 8
  prof s4_$run 560 $P XSPLITS=4 -- $A 8
  prof s16_$run 560 $P XSPLITS=16 -- $A 8
  prof st3_$run 560 $P XLAUNCH=64,4,3 -- $A 8
  prof b32st3_$run 560 $P XLAUNCH=32,4,3 -- $A 8
done
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 2 done at $(( $(date +%s) - T0 )) s" | tee -a $L
