#!/usr/bin/env bash
# Dev only: block score estimate + 20-bit keys + entries union: GPU tests, selection pieces, W3 128K sparse beside exact stream.
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD:$PWD/.devbench
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; date -u
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_sparse_kernels.py tests/runner/test_sparse_graphs.py tests/kv/test_sparse_attention.py tests/kv/test_sparse_engine.py 2>&1 | tail -3
timeout 100 python3 .devbench/sel_pieces.py > $OUT/sel_pieces.jsonl 2>&1; cat $OUT/sel_pieces.jsonl | cut -c1-300 | tail -6
timeout 60 python3 .devbench/sel_bench.py > $OUT/sel_bench.jsonl 2>&1; cat $OUT/sel_bench.jsonl | cut -c1-300 | tail -6; date -u
F="--shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --sparse-budget-tokens 4096"
S='import sys,json;[print(json.dumps({k:v for k,v in d.items() if k in ("mode","ctx","ok","err","ttft_s","decode_tok_s","floor_tok_s","plan_decode_tok_s","peak_gpu_gib","kv_cache_dtype")})) for d in map(json.loads,sys.stdin)]'
timeout 120 python3 -m kvspill.bench $F --new-tokens 64 --cold-attention sparse --out $OUT/w5_128k.jsonl > $OUT/w5_128k.log 2>&1; echo rc=$?
grep '^{' $OUT/w5_128k.log | python3 -c "$S"; grep -E "Traceback|Error" $OUT/w5_128k.log | tail -3; date -u
timeout 110 python3 -m kvspill.bench $F --new-tokens 32 --cold-attention stream --out $OUT/stream.jsonl > $OUT/stream.log 2>&1; echo rc=$?
grep '^{' $OUT/stream.log | python3 -c "$S"; date -u
