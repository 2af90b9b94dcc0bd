#!/usr/bin/env bash
# Session 25, call 3 (committed code, no patches): GPU sparse tests; issue 13's GPU rows in one call: W5 sparse
# beside exact stream (real prefill), W3 512K sparse and W1 1M sparse (--fill-only-prefill).
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; git log --oneline -1 2>/dev/null; git status --short | head
echo "== tests $(date -u +%T)"
timeout 170 python3 -m pytest -q tests/runner/test_sparse_graphs.py tests/runner/test_skip_prefill_attention.py tests/kv/test_sparse_attention.py tests/runner/test_stream_graphs.py tests/kernels/test_sparse_kernels.py -p no:cacheprovider 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -8
run() { [ $(( $(date +%s) - T0 )) -lt $1 ] || { echo "skip $*"; return; }; shift; echo "== $(date -u +%T) $*"; timeout 120 python3 -m kvspill.bench "$@" > /tmp/row.log 2>&1; echo "rc=$?"; grep -iv warning /tmp/row.log | grep -i "error\|out of memory\|Traceback" | tail -3; }
S="--cold-attention sparse --sparse-budget-tokens 4096"
W5="--shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --new-tokens 32"
run 420 $W5 $S --out $OUT/rows.jsonl
run 440 $W5 --cold-attention stream --out $OUT/rows.jsonl
run 460 --shape llama-8b --cap-gib 24 --cpu-kv-gib 66 --ctx 524288 --chunk 8192 --new-tokens 32 $S --fill-only-prefill --out $OUT/rows.jsonl
run 470 --shape llama-1b --cap-gib 16 --cpu-kv-gib 34 --ctx 1048576 --chunk 16384 --new-tokens 64 $S --fill-only-prefill --out $OUT/rows.jsonl
run 500 $W5 $S --fill-only-prefill --out $OUT/rows.jsonl
python3 .devbench/s22/show.py $OUT/rows.jsonl 2>&1 | tail -8
date -u
