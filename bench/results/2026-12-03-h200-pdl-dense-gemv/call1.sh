#!/bin/bash
# Session 34 call 1: kernel tables of W1 bf16, 8B fp8, 8B bf16 at 8K; 8B Q4_K batched 8 x 2K.
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv
P="python3 -m kvspill.bench.profile_decode"
$P --shape llama-1b --ctx 8192 --steps 100 --kernels 10 > $OUT/w1_8k.txt 2>&1; tail -45 $OUT/w1_8k.txt
$P --shape llama-8b:fp8 --ctx 8192 --steps 100 --kernels 10 > $OUT/fp8_8k.txt 2>&1; tail -45 $OUT/fp8_8k.txt
$P --shape llama-8b --ctx 8192 --steps 100 --kernels 10 > $OUT/bf16_8k.txt 2>&1; tail -45 $OUT/bf16_8k.txt
$P --shape llama-8b:q4_k --ctx 2048 --concurrency 8 --steps 60 --kernels 10 > $OUT/q4k_b8.txt 2>&1; tail -45 $OUT/q4k_b8.txt
