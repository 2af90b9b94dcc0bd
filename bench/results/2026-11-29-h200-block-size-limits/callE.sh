#!/usr/bin/env bash
# Session 24, call E: why W1 1M sparse decodes at 61 tok/s with 8-token blocks against 112 with 16: kernel
# tables of a decode step (prefill attention skipped), both block sizes.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
T0=$(date +%s)
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
W1="--shape llama-1b --cap-gib 16 --cpu-kv-gib 34 --ctx 1048576 --chunk 16384 --cold-attention sparse --sparse-budget-tokens 4096 --fill-only-prefill"
for bs in 8 16; do
  [ $(( $(date +%s) - T0 )) -lt 300 ] || break
  echo "== profile W1 1M bs$bs $(date -u +%T)"
  timeout 150 python3 .devbench/s24/w5_prof.py $W1 --block-size $bs 2>&1 | grep -iv warn | tail -30
done
date -u
