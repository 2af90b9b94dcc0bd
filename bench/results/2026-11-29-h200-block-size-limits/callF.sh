#!/usr/bin/env bash
# Session 24, call F (the same machine as E): W1 1M sparse rows, 8- and 16-token blocks, prefill attention skipped.
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done; export PYTHONPATH=/tmp/site:$PWD
W1="--shape llama-1b --cap-gib 16 --cpu-kv-gib 34 --ctx 1048576 --chunk 16384 --new-tokens 64 --sparse-budget-tokens 4096 --cold-attention sparse --fill-only-prefill"
for bs in 8 16 8; do timeout 80 python3 -m kvspill.bench $W1 --block-size $bs --out $OUT/w1.jsonl > /tmp/r.log 2>&1; echo "bs$bs rc=$?"; done
