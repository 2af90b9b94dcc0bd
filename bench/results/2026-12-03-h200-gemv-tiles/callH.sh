#!/usr/bin/env bash
# One-token GEMV tiles per shape with PDL (fp8 and bf16), then the engine with the picks beside the defaults.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callH.log; P=$OUT/prof.txt; S=.devbench/s39
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 330 python3 $S/gemv_sweep.py $OUT/picks.json > $OUT/sweep.log 2>&1; echo "sweep rc $?: $(tail -1 $OUT/sweep.log)" | tee -a $L
[ -f $OUT/picks.json ] || exit 1
pd() { echo "== $*" >> $P; timeout 60 python3 "$@" >> $P 2>&1; echo "${*} rc $?: $(grep engine.step $P | tail -1)" | tee -a $L; }
for pair in "llama-8b:fp8 fp8" "llama-8b bf16" "llama-1b bf16"; do
  set -- $pair
  pd -m kvspill.bench.profile_decode --shape $1 --ctx 8192 --steps 100 --kv-cache-memory 8GiB
  pd $S/with_picks.py $OUT/picks.json $2 kvspill.bench.profile_decode --shape $1 --ctx 8192 --steps 100 --kv-cache-memory 8GiB
done
echo "call H done at $(( $(date +%s) - T0 )) s" | tee -a $L
