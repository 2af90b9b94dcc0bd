#!/usr/bin/env bash
# Session 13, call A: where the fp8 KV stream step's time goes (W3 128K), beside bf16 stream and split.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --ctx 131072"
prof() { name=$1; shift; date -u; NTOK=48 PROF_AT=30 timeout 170 python3 .devbench/sparse_prof.py $A "$@" > $OUT/prof_$name.txt 2>&1; grep -E "ttft|profiled|decode ms" $OUT/prof_$name.txt; }
prof fp8_stream --cold-attention stream --kv-cache-dtype fp8
prof bf16_stream --cold-attention stream
prof bf16_split --cold-attention split
date -u
