#!/usr/bin/env bash
# Session 22, call X: W5 128K with 8-token blocks, prompt anchors on and off, in one call; keeps GGUF half A.
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
cp .smolA/smolpart_aa /tmp/smolpart_aa &
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
run() { [ $(( $(date +%s) - T0 )) -lt 250 ] || { echo "skip $*"; return; }; echo "== $(date -u +%T) $*"; timeout 100 python3 -m kvspill.bench "$@" > /tmp/row.log 2>&1; echo "rc=$?"; grep -iv warning /tmp/row.log | grep -i "error\|out of memory" | tail -3; }
W5="--shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --new-tokens 32 --sparse-budget-tokens 4096 --cold-attention sparse --block-size 8"
run $W5 --sparse-prompt-window 32 --out $OUT/w5.jsonl
run $W5 --out $OUT/w5.jsonl
run $W5 --sparse-prompt-window 32 --out $OUT/w5.jsonl
run $W5 --out $OUT/w5.jsonl
python3 .devbench/s22/show.py $OUT/w5.jsonl 2>&1 | tail -8
wait; ls -la /tmp/smolpart_aa; date -u
