#!/usr/bin/env bash
# Dev only: issue 13, selection kernels v3 (int32 search, sorted ranks past 512): kernel tests, microbench, W3 128K graph, W1 1M.
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; date -u
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_sparse_kernels.py 2>&1 | tail -2
timeout 80 python3 .devbench/sel_bench.py > $OUT/sel_bench.jsonl 2>&1; cat $OUT/sel_bench.jsonl | cut -c1-300 | tail -6; date -u
F="--shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --sparse-budget-tokens 4096"
MODES=graph timeout 130 python3 .devbench/sparse_graph_drv.py $F --cold-attention sparse --new-tokens 64 > $OUT/sg_bf16.log 2>&1; echo rc=$?
grep -E "^\{|graphs:|Traceback|Error|captured a sparse" $OUT/sg_bf16.log | cut -c1-400 | tail -6; date -u
S='import sys,json;[print(json.dumps({k:v for k,v in d.items() if k in ("mode","ctx","ok","err","ttft_s","decode_tok_s","floor_tok_s","plan_decode_tok_s","peak_gpu_gib","host_rss_gib","plan_ttft_s")})) for d in map(json.loads,sys.stdin)]'
timeout 360 python3 -m kvspill.bench --shape llama-1b --cap-gib 16 --cpu-kv-gib 34 --ctx 1048576 --chunk 16384 --new-tokens 32 --sparse-budget-tokens 4096 --cold-attention sparse --out $OUT/w5_1m.jsonl > $OUT/w5_1m.log 2>&1; echo rc=$?
grep '^{' $OUT/w5_1m.log | python3 -c "$S"; grep -E "Traceback|Error|out of memory in a step" $OUT/w5_1m.log | cut -c1-200 | tail -5; date -u
