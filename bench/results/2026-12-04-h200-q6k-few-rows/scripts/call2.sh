#!/usr/bin/env bash
# Call 2: rows-ahead L2 prefetch in the int16-x one-token kernels: sweep, then engine 8K batch 1 off/on alternated.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s47; L=$OUT/call2.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 240 python3 $S/ahead_sweep.py $OUT 2>&1 | grep -v Warn | tee -a $L
A=$(cat $OUT/best_ahead.txt 2>/dev/null || echo 528); [ "$A" = 0 ] && A=528
echo "sweep done at $(( $(date +%s) - T0 )) s; engine with ahead $A" | tee -a $L
for i in 1 2; do for a in 0 $A; do
  [ $(( $(date +%s) - T0 )) -lt 520 ] || break 2
  KVSPILL_GEMV_AHEAD=$a timeout 60 python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --ctx 8192 --steps 100 --kv-cache-memory 8GiB > $OUT/prof_a${a}_$i.txt 2>&1
  echo "ahead $a run $i rc $?: $(grep engine.step $OUT/prof_a${a}_$i.txt)" | tee -a $L
done; done
echo "call 2 done at $(( $(date +%s) - T0 )) s" | tee -a $L
