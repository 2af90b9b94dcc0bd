#!/usr/bin/env bash
# Call 5 (prepared 2026-12-06 11:45 UTC, not run): the Q6_K words form reading its 16 scale bytes
# once a super-block (one 16-byte load, split in registers: q6k_scale_loads.diff, /tmp/q6s) against
# today's 8 two-byte loads a super-block, each sent through shared memory (sm_90 compile of the
# 32-token kernel, Triton 3.6: 22 -> 8 BAR.SYNC a loop, no STS.U8 / LDS.U16; dev host only). Its
# GPU tests from the copy's own folder (so the copy is what runs), the Q6_K kernels at 4-32 tokens
# (../../2026-12-06-h100-words-one-dot/scripts/sweep_words.py, alternated twice), then the engine at
# 8 / 32 x 2K alternated twice and 16 x 2K with the words form's one dot (/tmp/od4) once.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call5
W=bench/results/2026-12-06-h100-words-one-dot/scripts
Q=bench/results/2026-12-06-h100-q6k-scale-loads/scripts
. $W/prof_tree.sh
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs  # $OUT keeps few files: all but the log tarred
mkdir -p /tmp/q6s && cp -r kvspill tests pyproject.toml /tmp/q6s/ && (cd /tmp/q6s && git apply $OLDPWD/$Q/q6k_scale_loads.diff) && echo "patched /tmp/q6s" | tee -a $L
mkdir -p /tmp/od4 && cp -r kvspill /tmp/od4/ && python3 $W/one_dot_patch.py /tmp/od4 q4 | tee -a $L
which_tree q6s PYTHONPATH=/tmp/site:/tmp/q6s
(cd /tmp/q6s && PYTHONSAFEPATH=1 PYTHONPATH=/tmp/site:/tmp/q6s timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_q6k_split.py tests/kernels/test_gguf_mma.py -k "Q6_K or q6k or split" > $OUT/pytest5.txt 2>&1)
echo "pytest (copy) rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest5.txt)" | tee -a $L
for run in 1 2; do
  TYPES=Q6_K timeout 60 python3 $W/sweep_words.py today >> $OUT/words.jsonl 2>>$OUT/words.err
  TYPES=Q6_K PYTHONPATH=/tmp/site:/tmp/q6s timeout 60 python3 $W/sweep_words.py scale_loads >> $OUT/words.jsonl 2>>$OUT/words.err
done
echo "sweeps at $(( $(date +%s) - T0 )) s" | tee -a $L
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency"
for run in 1 2; do
  for n in 8 32; do
    prof c${n}_today_$run 520 PYTHONPATH=/tmp/site:$PWD -- $A $n
    prof c${n}_q6s_$run 520 PYTHONPATH=/tmp/site:/tmp/q6s -- $A $n
  done
done
prof c16_today 560 PYTHONPATH=/tmp/site:$PWD -- $A 16
prof c16_q6s 560 PYTHONPATH=/tmp/site:/tmp/q6s -- $A 16
prof c16_one_dot 560 PYTHONPATH=/tmp/site:/tmp/od4 -- $A 16
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 5 done at $(( $(date +%s) - T0 )) s" | tee -a $L
