#!/usr/bin/env bash
# Session 14, call B (same machine when warm; calibrates again if not): W3 128K bf16 auto and stream,
# fp8 auto (graph) and fp8 stream eager; the plan's rows out of sample.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
ls ~/.cache/kvspill/calibration.json 2>/dev/null || timeout 110 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1
cat ~/.cache/kvspill/calibration.json
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32"
run() { date -u; timeout 100 python3 -m kvspill.bench "$@" --out $OUT/bench.jsonl 2>&1 | grep -iv warning | tail -1 | cut -c1-100; }
run $A --ctx 131072 --mode auto-128k
run $A --ctx 131072 --kv-cache-dtype fp8 --mode auto-fp8-128k
KVSPILL_STREAM_CUDA_GRAPHS=0 run $A --ctx 131072 --cold-attention stream --kv-cache-dtype fp8 --mode eager-fp8-stream-128k
run $A --ctx 131072 --cold-attention stream --mode stream-128k
date -u
python3 .devbench/s14/show.py $OUT/bench.jsonl
