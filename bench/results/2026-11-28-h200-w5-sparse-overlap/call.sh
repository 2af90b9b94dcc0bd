#!/usr/bin/env bash
# Session 15, call D: W5 128K with the sparse selection + gather beside the gpu tier's attention
# (KVSPILL_SPARSE_OVERLAP=1, the new default) against before (=0), same call; GPU tests.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
W5="--shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --new-tokens 32 --sparse-budget-tokens 4096 --cold-attention sparse"
run() { date -u; timeout 110 python3 -m kvspill.bench "$@" 2>&1 | grep -iv warning | tail -1 | cut -c1-100; }
KVSPILL_SPARSE_OVERLAP=1 run $W5 --mode w5-overlap --out $OUT/w5.jsonl
KVSPILL_SPARSE_OVERLAP=0 run $W5 --mode w5-no-overlap --out $OUT/w5.jsonl
KVSPILL_SPARSE_OVERLAP=1 run $W5 --mode w5-overlap-again --out $OUT/w5.jsonl
date -u; python3 .devbench/s15/show.py $OUT/w5.jsonl
timeout 150 python3 -m pytest -q tests/runner/test_sparse_graphs.py tests/kv/test_sparse_attention.py -p no:cacheprovider 2>&1 | tail -4
date -u
