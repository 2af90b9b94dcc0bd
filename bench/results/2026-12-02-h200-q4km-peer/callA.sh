#!/usr/bin/env bash
# Session 32 call A: llama.cpp build, the random-weight Llama-3.1-8B f16 GGUF and its Q4_K_M (written
# to a .part name, renamed when llama-quantize ends: a cut-off file is never taken), and the GPU
# kernel tests (gguf_mma after its cleanup) while the build runs.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s32; L=$OUT/callA.log
{ date -u; cat $S/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
(timeout 300 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_mma.py tests/kernels/test_gguf_gemv.py tests/kernels/test_gguf_dequant.py -x > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc $?" >> $OUT/gpu_tests.log) &
PEER=.peer bash $S/llamacpp_peer.sh build 2>&1 | tail -3 | tee -a $L
echo "build done at $(( $(date +%s) - T0 )) s" | tee -a $L
SHAPE=8b PEER=.peer bash $S/llamacpp_peer.sh model 2>&1 | tail -3 | tee -a $L
echo "f16 model done at $(( $(date +%s) - T0 )) s" | tee -a $L
if [ ! -f /tmp/l8b-Q4_K_M.gguf ]; then
  timeout $(( 585 - ($(date +%s) - T0) )) /tmp/lcpp-build/bin/llama-quantize /tmp/l8b.gguf /tmp/l8b-Q4_K_M.part Q4_K_M 16 > /tmp/quant.log 2>&1 \
    && mv /tmp/l8b-Q4_K_M.part /tmp/l8b-Q4_K_M.gguf
  tail -2 /tmp/quant.log | tee -a $L
fi
ls -la /tmp/l8b* | tee -a $L
wait
tail -5 $OUT/gpu_tests.log | tee -a $L
echo "call A done at $(( $(date +%s) - T0 )) s" | tee -a $L
