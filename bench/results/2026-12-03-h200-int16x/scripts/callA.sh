#!/usr/bin/env bash
# Next session, call A (carry [".whl", ".devbench", ".peer"]): diagnose test_gpu's quantized test
# while llama.cpp builds; then the random-weight Llama-3.1-8B f16 GGUF and its Q4_K_M by llama-quantize
# (to a .part name, renamed when done). Leaves the machine warm for callB.sh (run it at once).
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s36; L=$OUT/callA.log
{ date -u; git log --oneline | head -1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
(timeout 280 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py -k quantized -vv > $OUT/gpu_test.log 2>&1; echo "rc $?" >> $OUT/gpu_test.log
 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_mma.py -x > $OUT/mma_test.log 2>&1; echo "rc $?" >> $OUT/mma_test.log) &
PEER=.peer bash $S/llamacpp_peer.sh build 2>&1 | tail -2 | tee -a $L
echo "build done at $(( $(date +%s) - T0 )) s" | tee -a $L
SHAPE=8b PEER=.peer bash $S/llamacpp_peer.sh model 2>&1 | tail -2 | tee -a $L
if [ ! -f /tmp/l8b-Q4_K_M.gguf ]; then
  timeout $(( 585 - ($(date +%s) - T0) )) /tmp/lcpp-build/bin/llama-quantize /tmp/l8b.gguf /tmp/l8b-Q4_K_M.part Q4_K_M 16 > /tmp/quant.log 2>&1 \
    && mv /tmp/l8b-Q4_K_M.part /tmp/l8b-Q4_K_M.gguf
  tail -1 /tmp/quant.log | tee -a $L
fi
ls -la /tmp/l8b* | tee -a $L; wait; tail -40 $OUT/gpu_test.log | tee -a $L; tail -5 $OUT/mma_test.log | tee -a $L
echo "call A done at $(( $(date +%s) - T0 )) s" | tee -a $L
