#!/usr/bin/env bash
# Session 14, call D (out of sample, another machine): fp8 KV, where the plan puts the graph/split
# crossing at ~160 MB per layer (~78K cold tokens): 160K (52K cold: graph faster) and 256K (150K
# cold: split faster), each stream (graph) and split; auto at 256K.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader; nproc
timeout 110 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A16 "calibration saved" $OUT/calibrate.txt | head -18
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32 --kv-cache-dtype fp8"
run() { date -u; timeout 120 python3 -m kvspill.bench "$@" --out $OUT/bench.jsonl 2>&1 | grep -iv warning | tail -1 | cut -c1-100; }
run $A --ctx 163840 --cold-attention stream --mode stream-160k
run $A --ctx 163840 --cold-attention split --mode split-160k
run $A --ctx 262144 --cold-attention stream --mode stream-256k
run $A --ctx 262144 --cold-attention split --mode split-256k
run $A --ctx 262144 --mode auto-256k
date -u
python3 .devbench/s14/show.py $OUT/bench.jsonl
