#!/usr/bin/env bash
# Session 28 call F: context shift on CUDA (issue 52), from a clean export of HEAD.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 1; }
ROOT=$PWD
cd .devbench/clean
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u
timeout 150 python3 $ROOT/.devbench/s28/shift_gpu.py fp8 int8 > $OUT/shift.log 2>&1
echo rc $?
grep -E "^\{|Error|error" $OUT/shift.log | head -12
date -u
