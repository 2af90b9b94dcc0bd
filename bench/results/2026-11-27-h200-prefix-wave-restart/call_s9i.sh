#!/usr/bin/env bash
# Dev only: prefix bench A/B in one call: before today's changes (375f04a, .devbench/old) vs now; persist (restart) and cpu phases; + the sparse graph GPU test.
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
date -u; free -g | head -2
PYTHONPATH=/tmp/site:$PWD timeout 100 python3 -m pytest -q -p no:cacheprovider tests/runner/test_sparse_graphs.py 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -3
S='import sys,json;[print(json.dumps({k:v for k,v in d.items() if k in ("phase","cold_ttft_s","ttft_p50_s","ttft_max_s","ttft_s","read_bytes_per_hit","questions_wall_s","persist_write_s","persist_loaded_blocks","persist_bytes_read")})) for d in map(json.loads,sys.stdin)]'
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --persist-dir /tmp/kvpersist --ctx 131072 --questions 16 --concurrency 4"
for ph in persist cpu; do
  for v in old new; do
    if [ $v = old ]; then P=/tmp/site:$PWD/.devbench/old; else P=/tmp/site:$PWD; fi
    PYTHONPATH=$P timeout 170 python3 -m kvspill.bench.prefix_bench $A --phases $ph --out $OUT/${ph}_$v.jsonl > $OUT/${ph}_$v.log 2>&1; echo "$ph $v rc=$?"
    grep '^{' $OUT/${ph}_$v.log | python3 -c "$S"; grep -E "Traceback|Error" $OUT/${ph}_$v.log | tail -3; date -u; free -g | sed -n 2p
  done
done
