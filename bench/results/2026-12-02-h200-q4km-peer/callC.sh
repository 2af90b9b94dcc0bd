#!/usr/bin/env bash
# Session 32 call C: the Q6_K tensor-core sweep (and Q4_K at 2 / 4 tokens against the lane GEMV) on the
# GPU while llama.cpp builds and writes the Q4_K_M file on the CPU (the machine was cold); then pure
# decode of 8 / 16 / 32 x 2K on that file with the picks if time is left. The picks stay in /tmp for call D.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s32; L=$OUT/callC.log; F=/tmp/l8b-Q4_K_M.gguf
{ date -u; cat $S/COMMIT; } | tee -a $L
(nice -n 10 bash $S/make_file.sh > /tmp/make_file.log 2>&1; echo "file done at $(( $(date +%s) - T0 )) s" >> /tmp/make_file.log) &
MF=$!
MMA6_WORKERS=6 timeout 240 python3 $S/mma6_sweep.py 210 > $OUT/sweep.log 2>&1; echo "sweep rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L
cp $OUT/mma6_best.json /tmp/picks.json 2>/dev/null
grep -E "stage2 T=|best|Error|error" $OUT/sweep.log | cut -c1-400 | tail -12 | tee -a $L
wait $MF; cat /tmp/make_file.log | tee -a $L
if [ -f $F ] && [ $(( $(date +%s) - T0 )) -lt 480 ]; then
  PICKS=/tmp/picks.json timeout $(( 585 - ($(date +%s) - T0) )) python3 $S/prof_batch.py $F 16GiB 2048 8 16 32 > $OUT/prof_picks.txt 2>&1; echo "picks rc $?" | tee -a $L
  grep -h RESULT $OUT/prof_picks.txt | tee -a $L
fi
echo "call C done at $(( $(date +%s) - T0 )) s" | tee -a $L
cd $OUT && tar -czf c.tgz *.log *.txt *.json *.jsonl 2>/dev/null
