#!/usr/bin/env bash
# Dev only: final GPU checks of this session's changes: tests, W3 128K exact stream (numpy chunk plan), prefix cpu phase.
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; date -u
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/kv/test_cold_attention.py tests/kv/test_cold_stream_plan.py tests/kv/test_disk_pool.py tests/kv/test_runner_tiers.py tests/engine/test_prefix_cache_e2e.py tests/kv/test_sparse_attention.py tests/kv/test_sparse_engine.py tests/runner/test_sparse_graphs.py 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -8; date -u
S='import sys,json;[print(json.dumps({k:v for k,v in d.items() if k in ("mode","phase","ctx","ok","ttft_s","decode_tok_s","floor_tok_s","plan_decode_tok_s","ttft_p50_s","ttft_max_s","ttft_s","read_bytes_per_hit","questions_wall_s","cold_ttft_s")})) for d in map(json.loads,sys.stdin)]'
timeout 100 python3 -m kvspill.bench --shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --new-tokens 16 --cold-attention stream --out $OUT/stream.jsonl > $OUT/stream.log 2>&1; echo rc=$?
grep '^{' $OUT/stream.log | python3 -c "$S"; date -u
timeout 200 python3 -m kvspill.bench.prefix_bench --shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --ctx 131072 --questions 8 --concurrency 4 --phases cpu --out $OUT/prefix_cpu.jsonl > $OUT/prefix_cpu.log 2>&1; echo rc=$?
grep '^{' $OUT/prefix_cpu.log | python3 -c "$S"; grep -E "Traceback|Error" $OUT/prefix_cpu.log | tail -3; date -u
