#!/usr/bin/env bash
# Session 14, call A: calibrate; W3 bf16 around the plan's graph/split crossing (~26K cold tokens):
# 72K (~17K cold) and 96K (~41K cold), each stream (graph), split (eager) and auto.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader; nproc
timeout 110 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A16 "calibration saved" $OUT/calibrate.txt | head -18
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32"
run() { date -u; timeout 90 python3 -m kvspill.bench "$@" --out $OUT/bench.jsonl 2>&1 | grep -iv warning | tail -1 | cut -c1-100; }
run $A --ctx 73728 --cold-attention stream --mode stream-72k
run $A --ctx 73728 --cold-attention split --mode split-72k
run $A --ctx 73728 --mode auto-72k
run $A --ctx 98304 --cold-attention stream --mode stream-96k
run $A --ctx 98304 --cold-attention split --mode split-96k
run $A --ctx 98304 --mode auto-96k
date -u
python3 .devbench/s14/show.py $OUT/bench.jsonl
