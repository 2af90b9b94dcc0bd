#!/usr/bin/env bash
# int16-x kernel: GPU tests, wider config sweep, engine 8K / 32K with KVSPILL_INT16_X off / on.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s36; L=$OUT/callD.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_int16x.py tests/kernels/test_gguf_gemv.py "tests/engine/test_gpu.py::test_quantized_weights_on_cuda_match_the_torch_reference" > $OUT/tests.log 2>&1; echo "rc $?" >> $OUT/tests.log; tail -4 $OUT/tests.log | tee -a $L
timeout 150 python3 $S/int16x_sweep.py $OUT 2>&1 | tail -8 | tee -a $L
echo "sweep done at $(( $(date +%s) - T0 )) s" | tee -a $L
for ctx in 8192 32768; do for on in 0 1; do
  KVSPILL_INT16_X=$on timeout 70 python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --ctx $ctx --steps 100 --kv-cache-memory 8GiB > $OUT/prof${ctx}_int16x$on.txt 2>&1
  echo "ctx $ctx int16x=$on rc $?: $(grep engine.step $OUT/prof${ctx}_int16x$on.txt)" | tee -a $L
done; done
echo "call D done at $(( $(date +%s) - T0 )) s" | tee -a $L
