#!/usr/bin/env bash
# Session 24, call B: W5 128K bs16 sparse beside exact stream (same call); the same sparse row with
# --fill-only-prefill (its first GPU run); kernel tables of a W5 step with 16- and 8-token blocks; GPU tests.
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; git log --oneline -1 2>/dev/null
run() { [ $(( $(date +%s) - T0 )) -lt 420 ] || { echo "skip $*"; return; }; echo "== $(date -u +%T) $*"; timeout 110 python3 -m kvspill.bench "$@" > /tmp/row.log 2>&1; echo "rc=$?"; grep -iv warning /tmp/row.log | grep -i "error\|out of memory\|tok/s" | tail -3; }
W5="--shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --new-tokens 32"
run $W5 --cold-attention sparse --sparse-budget-tokens 4096 --out $OUT/w5.jsonl
run $W5 --cold-attention stream --out $OUT/w5.jsonl
run $W5 --cold-attention sparse --sparse-budget-tokens 4096 --fill-only-prefill --out $OUT/w5.jsonl
for bs in 8 16; do
  [ $(( $(date +%s) - T0 )) -lt 440 ] || break
  echo "== profile bs$bs $(date -u +%T)"
  timeout 100 python3 .devbench/s24/w5_prof.py $W5 --cold-attention sparse --sparse-budget-tokens 4096 --block-size $bs --fill-only-prefill 2>&1 | grep -iv warn | tail -28
done
python3 .devbench/s22/show.py $OUT/w5.jsonl 2>&1 | tail -8
[ $(( $(date +%s) - T0 )) -lt 520 ] && timeout 60 python3 -m pytest -q tests/runner/test_sparse_graphs.py tests/runner/test_skip_prefill_attention.py -p no:cacheprovider 2>&1 | tail -3
date -u
