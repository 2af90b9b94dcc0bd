#!/usr/bin/env bash
# Call 1: int16-x one-token kernels with PREFETCH: GPU tests, per-shape sweep, engine 8K batch 1 today vs picks.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s47; L=$OUT/call1.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_int16x.py > $OUT/tests.log 2>&1; echo "tests rc $?" | tee -a $L; tail -3 $OUT/tests.log | tee -a $L
timeout 260 python3 $S/pf_sweep.py $OUT 2>&1 | grep -v Warn | tee -a $L
echo "sweep done at $(( $(date +%s) - T0 )) s" | tee -a $L
for i in 1 2; do for v in today picks; do
  [ $(( $(date +%s) - T0 )) -lt 530 ] || break 2
  if [ $v = picks ]; then E="PICKS=$OUT/picks.json"; else E="PICKS="; fi
  env $E timeout 60 python3 $S/prof_picks.py --shape llama-8b:q4_k_m --ctx 8192 --steps 100 --kv-cache-memory 8GiB > $OUT/prof_${v}_$i.txt 2>&1
  echo "$v $i rc $?: $(grep engine.step $OUT/prof_${v}_$i.txt)" | tee -a $L
done; done
echo "call 1 done at $(( $(date +%s) - T0 )) s" | tee -a $L
