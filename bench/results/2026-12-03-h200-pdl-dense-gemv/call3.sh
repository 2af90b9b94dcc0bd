#!/bin/bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
timeout 120 python3 -m pytest -q -x tests/kernels/test_pdl.py tests/kernels/test_fused_ops.py tests/kernels/test_decode_attention.py tests/kernels/test_rope_store.py -p no:cacheprovider 2>&1 | tail -3
P="python3 .devbench/s34/prof.py --ctx 8192 --steps 100"
run() { echo "== $1 PDL=$2 DENSE=$3"; KVSPILL_PDL=$2 DENSE=$3 timeout 60 $P --shape $1 2>&1 | grep -E "engine.step|Error|error" | head -3; }
run llama-1b 0 0; run llama-1b 1 0; run llama-1b 1 1; run llama-1b 0 1
run llama-8b:fp8 0 0; run llama-8b:fp8 1 1; run llama-8b 0 0; run llama-8b 1 1
run llama-8b:q4_k 0 0; run llama-8b:q4_k 1 0
timeout 150 python3 .devbench/s34/dense_sweep.py $OUT/dense_sweep.json 2>&1 | tail -10
