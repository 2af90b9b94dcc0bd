#!/usr/bin/env bash
# Call 3 (2026-11-27): int8 rows with a 16-byte tail (16-byte aligned) vs the 4-byte tail, W3 8K decode, bf16 beside.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONPATH=/tmp/site:$PWD
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/runner/test_attention_int8.py tests/kernels/test_decode_attention.py tests/kernels/test_prefill_attention.py -k "int8" 2>&1 | tail -3
run() {  # label pythonpath dtype
  PYTHONPATH=/tmp/site:$2 timeout 120 python3 .devbench/sparse_prof.py --shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 8192 --cold-attention stream --kv-cache-dtype $3 > $OUT/$1.log 2>&1; echo "== $1 rc=$?"
  grep -E "ms/step|Traceback|Error" $OUT/$1.log | tail -2
  grep -A 6 "Self CUDA" $OUT/$1.log | head -7 | cut -c1-70,150-185
}
for rep in 1 2; do
  run tail16_int8_$rep $PWD int8
  run tail4_int8_$rep $PWD/.devbench/old int8
done
run bf16 $PWD auto
date -u
