#!/usr/bin/env bash
# Call 1: int16-x rounded once (GPU tests, per-shape sweep, engine 8K A/B).
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s44; L=$OUT/call1.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 150 python3 -m pytest -q -x tests/kernels/test_gguf_int16x.py > $OUT/tests.log 2>&1; echo "tests rc $? $(tail -1 $OUT/tests.log)" | tee -a $L
timeout 200 python3 $S/pre_sweep.py $OUT > $OUT/sweep.log 2>&1; echo "sweep rc $?" | tee -a $L
echo "at $(( $(date +%s) - T0 )) s" | tee -a $L
for r in 1 2; do for once in 0 1; do
  KVSPILL_INT16_X_ONCE=$once timeout 60 python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --ctx 8192 --steps 100 --kv-cache-memory 8GiB > $OUT/prof_once${once}_$r.txt 2>&1
  echo "once=$once r$r: $(grep engine.step $OUT/prof_once${once}_$r.txt)" | tee -a $L
done; done
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
