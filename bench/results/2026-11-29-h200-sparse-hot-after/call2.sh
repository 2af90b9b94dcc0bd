#!/usr/bin/env bash
# Session 25, call 2: where the gpu-tier attention starts beside the sparse side stream (KVSPILL_SPARSE_HOT_AFTER
# none|keys|select), W5 128K fill-only, register_blocks 4096 (call 1's pick); GPU sparse tests with the event.
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
W5="--shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --new-tokens 32 --fill-only-prefill --cold-attention sparse --sparse-budget-tokens 4096"
run() { [ $(( $(date +%s) - T0 )) -lt 330 ] || { echo "skip $*"; return; }; echo "== $(date -u +%T) $*"; KVSPILL_SPARSE_HOT_AFTER=$1 timeout 80 python3 .devbench/s25/tuned.py .devbench/s25/pick1.json $W5 --mode "sparse-hot-$1" --out $OUT/w5.jsonl > /tmp/row.log 2>&1; echo "rc=$?"; grep -iv warning /tmp/row.log | grep -i "error\|out of memory\|Traceback" | tail -3; }
for v in none keys select select keys none keys select; do run $v; done
python3 .devbench/s22/show.py $OUT/w5.jsonl 2>&1 | tail -10
echo "== tests $(date -u +%T)"
KVSPILL_SPARSE_HOT_AFTER=keys timeout 100 python3 -m pytest -q tests/runner/test_sparse_graphs.py tests/runner/test_skip_prefill_attention.py tests/kv/test_sparse_attention.py -p no:cacheprovider 2>&1 | tail -3
[ $(( $(date +%s) - T0 )) -lt 470 ] && KVSPILL_SPARSE_HOT_AFTER=keys timeout 90 python3 .devbench/s25/tuned.py .devbench/s25/pick1.json --prof $W5 2>&1 | grep -iv warn | tail -16
date -u
