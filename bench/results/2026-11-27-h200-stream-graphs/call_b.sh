#!/usr/bin/env bash
# Session 13, call B: host time of the fp8 stream step (cProfile), and the same context all on the GPU.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --ctx 131072"
CPROF=1 NTOK=40 PROF_AT=24 timeout 170 python3 .devbench/sparse_prof.py $A --cold-attention stream --kv-cache-dtype fp8 > $OUT/cprof_fp8_stream.txt 2>&1; grep -E "ttft|profiled|decode ms" $OUT/cprof_fp8_stream.txt
date -u
timeout 150 python3 -m kvspill.bench --shape llama-8b --cap-gib 40 --cpu-kv-gib 4 --ctx 131072 --new-tokens 32 --kv-cache-dtype fp8 --mode gpu-only-fp8 --out $OUT/bench.jsonl 2>&1 | grep -v Warning | tail -1 | cut -c1-200
CPROF=1 NTOK=40 PROF_AT=24 timeout 120 python3 .devbench/sparse_prof.py --shape llama-1b --cap-gib 16 --cpu-kv-gib 6 --ctx 32768 --attention cpu > $OUT/cprof_w1_cpu.txt 2>&1; grep -E "ttft|profiled|decode ms" $OUT/cprof_w1_cpu.txt
date -u
