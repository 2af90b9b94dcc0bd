#!/usr/bin/env bash
# Call 7: half-group lanes for the one-token Q4_K kernel: kernels, then engine 8K alternated.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s47; L=$OUT/call7.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 70 python3 $S/half_sweep.py $OUT 2>&1 | grep -v Warn | tee -a $L
H=$(cat $OUT/best_half.txt 2>/dev/null || echo 1)
echo "sweep done at $(( $(date +%s) - T0 )) s; engine with half $H" | tee -a $L
A="--shape llama-8b:q4_k_m --ctx 8192 --steps 100 --kv-cache-memory 8GiB"
KVSPILL_HALF_LANES=$H timeout 70 python3 -m kvspill.bench.profile_decode $A > $OUT/prof_warm.txt 2>&1; echo "warm rc $?: $(grep engine.step $OUT/prof_warm.txt)" | tee -a $L
for i in 1 2; do for h in 0 $H; do
  [ $(( $(date +%s) - T0 )) -lt 175 ] || break 2
  KVSPILL_HALF_LANES=$h timeout 40 python3 -m kvspill.bench.profile_decode $A > $OUT/prof_h${h}_$i.txt 2>&1
  echo "half $h run $i rc $?: $(grep engine.step $OUT/prof_h${h}_$i.txt)" | tee -a $L
done; done
(cd $OUT && tar czf prof.tgz prof_*.txt && rm -f prof_*.txt)
echo "call 7 done at $(( $(date +%s) - T0 )) s" | tee -a $L
