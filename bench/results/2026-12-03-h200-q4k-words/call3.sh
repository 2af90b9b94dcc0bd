#!/bin/bash
# Session 35 call 3: GPU tests of the words form's ordered split-K reduction and the GEMV
# prologues; the prologue fusions on/off (W1, 8B fp8, 8B bf16); random Q4_K_M 8/16/32 x 2K.
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; git log --oneline | head -1
timeout 80 python3 -m pytest -q -x tests/kernels/test_gguf_mma.py -k "words" tests/kernels/test_fp8_gemv.py -p no:cacheprovider 2>&1 | tail -2
echo "tests at $(( $(date +%s) - T0 )) s"
P="python3 -m kvspill.bench.profile_decode --steps 100"
N=0
run() { N=$((N+1)); if [ $(( $(date +%s) - T0 )) -gt 360 ]; then echo "skip $N $*"; return; fi
  echo "== $N $*"; timeout 45 env "$@" > $OUT/run$N.txt 2>&1; grep -E "engine.step|Error|error" $OUT/run$N.txt | head -2; }
run X=1 $P --shape llama-8b:q4_k_m --ctx 2048 --concurrency 8
run KVSPILL_FUSED_PROLOGUE=0 $P --shape llama-1b --ctx 8192
run KVSPILL_FUSED_PROLOGUE=1 $P --shape llama-1b --ctx 8192
run KVSPILL_FUSED_PROLOGUE=0 $P --shape llama-8b:fp8 --ctx 8192
run KVSPILL_FUSED_PROLOGUE=1 $P --shape llama-8b:fp8 --ctx 8192
run KVSPILL_FUSED_PROLOGUE=0 $P --shape llama-8b --ctx 8192
run KVSPILL_FUSED_PROLOGUE=1 $P --shape llama-8b --ctx 8192
run X=1 $P --shape llama-8b:q4_k_m --ctx 2048 --concurrency 16 --kv-cache-memory 6GiB
run X=1 $P --shape llama-8b:q4_k_m --ctx 2048 --concurrency 32 --kv-cache-memory 12GiB
if [ $(( $(date +%s) - T0 )) -lt 380 ]; then
  timeout 70 python3 -m pytest -q -x tests/engine/test_gpu.py -k quantized_weights -p no:cacheprovider 2>&1 | tail -2
fi
echo "call done at $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf runs.tgz run*.txt && rm run*.txt
