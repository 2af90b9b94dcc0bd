#!/usr/bin/env bash
# Dev only: issue 13 final: kernel tests, W3 128K sparse (bench: plan + floor), int8 KV sparse graph vs eager, exact stream.
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; date -u
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_sparse_kernels.py tests/runner/test_sparse_graphs.py tests/kv/test_sparse_attention.py tests/kv/test_sparse_engine.py 2>&1 | tail -2
F="--shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --sparse-budget-tokens 4096"
S='import sys,json;[print(json.dumps({k:v for k,v in d.items() if k in ("mode","ctx","ok","err","ttft_s","decode_tok_s","floor_tok_s","plan_decode_tok_s","peak_gpu_gib","kv_cache_dtype")})) for d in map(json.loads,sys.stdin)]'
timeout 110 python3 -m kvspill.bench $F --new-tokens 64 --cold-attention sparse --out $OUT/w5_128k.jsonl > $OUT/w5_128k.log 2>&1; echo rc=$?
grep '^{' $OUT/w5_128k.log | python3 -c "$S"; grep -E "Traceback|Error" $OUT/w5_128k.log | tail -3; date -u
timeout 150 python3 .devbench/sparse_graph_drv.py $F --cold-attention sparse --kv-cache-dtype int8 --new-tokens 64 > $OUT/sg_int8.log 2>&1; echo rc=$?
grep -E "^\{|equal|graphs|Traceback|Error|captured a sparse|eager" $OUT/sg_int8.log | cut -c1-300 | tail -8; date -u
timeout 110 python3 -m kvspill.bench $F --new-tokens 32 --cold-attention stream --out $OUT/stream.jsonl > $OUT/stream.log 2>&1; echo rc=$?
grep '^{' $OUT/stream.log | python3 -c "$S"; date -u
