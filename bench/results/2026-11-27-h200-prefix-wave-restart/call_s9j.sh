#!/usr/bin/env bash
# Dev only: the restart row after the persist loader's completion queue (was O(reads) per finished read).
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
date -u
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/engine/test_prefix_cache_e2e.py 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -3
S='import sys,json;[print(json.dumps({k:v for k,v in d.items() if k in ("phase","cold_ttft_s","ttft_p50_s","ttft_max_s","ttft_s","read_bytes_per_hit","questions_wall_s","persist_write_s","persist_loaded_blocks","persist_bytes_read")})) for d in map(json.loads,sys.stdin)]'
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --persist-dir /tmp/kvpersist --ctx 131072 --questions 16 --concurrency 4"
timeout 200 python3 -m kvspill.bench.prefix_bench $A --phases persist --out $OUT/persist_new2.jsonl > $OUT/persist_new2.log 2>&1; echo "persist rc=$?"
grep '^{' $OUT/persist_new2.log | python3 -c "$S"; grep -E "Traceback|Error" $OUT/persist_new2.log | tail -3; date -u
