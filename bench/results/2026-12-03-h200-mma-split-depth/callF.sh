#!/usr/bin/env bash
set -u
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callF.log
{ date -u; git log --oneline | head -1; git status --short | head; } >> $L
timeout 40 python3 .devbench/s41/mma_check.py 2>&1 | tee -a $L | tail -3
for C in 8 32; do
  timeout 45 python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --ctx 2048 --concurrency $C --steps 100 --kv-cache-memory 12GiB 2>&1 | tee -a $L | grep engine.step
done
