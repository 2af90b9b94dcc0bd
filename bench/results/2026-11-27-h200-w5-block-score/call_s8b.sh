#!/usr/bin/env bash
# Dev only: entries union by sort: kernel tests, selection pieces, W1 1M sparse.
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD:$PWD/.devbench
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; date -u
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_sparse_kernels.py -k "selection or three or closer" 2>&1 | tail -2
timeout 100 python3 .devbench/sel_pieces.py > $OUT/sel_pieces.jsonl 2>&1; cat $OUT/sel_pieces.jsonl | cut -c1-300 | tail -6; date -u
S='import sys,json;[print(json.dumps({k:v for k,v in d.items() if k in ("mode","ctx","ok","err","ttft_s","decode_tok_s","floor_tok_s","plan_decode_tok_s","peak_gpu_gib","host_rss_gib","plan_ttft_s")})) for d in map(json.loads,sys.stdin)]'
timeout 400 python3 -m kvspill.bench --shape llama-1b --cap-gib 16 --cpu-kv-gib 34 --ctx 1048576 --chunk 16384 --new-tokens 64 --sparse-budget-tokens 4096 --cold-attention sparse --out $OUT/w5_1m.jsonl > $OUT/w5_1m.log 2>&1; echo rc=$?
grep '^{' $OUT/w5_1m.log | python3 -c "$S"; grep -E "Traceback|Error|out of memory in a step" $OUT/w5_1m.log | cut -c1-200 | tail -5; date -u
