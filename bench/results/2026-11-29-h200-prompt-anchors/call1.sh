#!/usr/bin/env bash
# Session 22, call 1: prompt anchors (--sparse-prompt-window) on CUDA: graphed against eager; W5 128K speed
# with and without them (16- and 8-token blocks); the sparse tests on the GPU. Keeps GGUF half A for call 2.
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
cp .smolA/smolpart_aa /tmp/smolpart_aa &
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; git log --oneline -1 2>/dev/null
timeout 150 python3 .devbench/s22/graphs_anchor.py 2>&1 | grep -v -i warn | tail -6
run() { [ $(( $(date +%s) - T0 )) -lt 480 ] || { echo "skip $*"; return; }; echo "== $(date -u +%T) $*"; timeout 110 python3 -m kvspill.bench "$@" > /tmp/row.log 2>&1; echo "rc=$?"; grep -iv warning /tmp/row.log | grep -i "error\|out of memory\|tok/s" | tail -3; }
W5="--shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --new-tokens 32 --sparse-budget-tokens 4096 --cold-attention sparse"
run $W5 --out $OUT/w5.jsonl
run $W5 --sparse-prompt-window 32 --out $OUT/w5.jsonl
run $W5 --sparse-prompt-window 32 --block-size 8 --out $OUT/w5.jsonl
run $W5 --out $OUT/w5.jsonl
run $W5 --sparse-prompt-window 32 --out $OUT/w5.jsonl
python3 .devbench/s22/show.py $OUT/w5.jsonl 2>&1 | tail -8
[ $(( $(date +%s) - T0 )) -lt 500 ] && timeout 80 python3 -m pytest -q -x tests/kv/test_sparse_anchor.py tests/runner/test_sparse_graphs.py -k "not slow" -p no:cacheprovider 2>&1 | tail -3
wait; ls -la /tmp/smolpart_aa; date -u
