#!/usr/bin/env bash
# Session 25, call 1: block_keys/select launch shapes under CUDA graphs; W5 with the pick beside the committed
# shapes and exact stream (all --fill-only-prefill), alternating.
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; git log --oneline -1 2>/dev/null
timeout 300 python3 .devbench/s25/keys_graph.py $OUT/pick.json 2>&1 | grep -v -i warn
[ -f $OUT/pick.json ] || { echo '{"keys": [32, 1, 4], "sel": {}}' > $OUT/pick.json; }
echo '{"keys": [32, 1, 4], "sel": {}}' > /tmp/base.json
W5="--shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --new-tokens 32 --fill-only-prefill"
run() { [ $(( $(date +%s) - T0 )) -lt 500 ] || { echo "skip $*"; return; }; echo "== $(date -u +%T) $*"; timeout 90 python3 .devbench/s25/tuned.py "$@" > /tmp/row.log 2>&1; echo "rc=$?"; grep -iv warning /tmp/row.log | grep -i "tuned\|error\|out of memory\|tok/s" | tail -3; }
run /tmp/base.json $W5 --cold-attention sparse --sparse-budget-tokens 4096 --mode sparse-base --out $OUT/w5.jsonl
run $OUT/pick.json $W5 --cold-attention sparse --sparse-budget-tokens 4096 --mode sparse-tuned --out $OUT/w5.jsonl
run /tmp/base.json $W5 --cold-attention stream --mode stream --out $OUT/w5.jsonl
run $OUT/pick.json $W5 --cold-attention sparse --sparse-budget-tokens 4096 --mode sparse-tuned --out $OUT/w5.jsonl
run /tmp/base.json $W5 --cold-attention sparse --sparse-budget-tokens 4096 --mode sparse-base --out $OUT/w5.jsonl
[ $(( $(date +%s) - T0 )) -lt 500 ] && timeout 80 python3 .devbench/s25/tuned.py $OUT/pick.json --prof $W5 --cold-attention sparse --sparse-budget-tokens 4096 2>&1 | grep -iv warn | tail -16
python3 .devbench/s22/show.py $OUT/w5.jsonl 2>&1 | tail -8
date -u
