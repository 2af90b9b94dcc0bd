#!/usr/bin/env bash
# Session 27 call D1: 3B serve start-up on a quiet host (twice: /health time, first vs later TTFT,
# a time-stamped log); then llama-quantize (CPU-only build) and the 8B Q4_K_M model for call D2.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)"
for run in 1 2; do
  export START=$(date +%s.%N)
  (python3 -m kvspill serve --model random:llama-3b --max-model-len 32768 --port 8100 2>&1 | python3 .devbench/s27/ts.py > $OUT/serve3b_ts_$run.log) &
  timeout 300 python3 .devbench/s27/client.py 8100 wait
  timeout 60 python3 .devbench/s27/client.py 8100 ttft $run
  pkill -TERM -f "kvspill serve"; sleep 4
  grep -E "memory plan before|Uvicorn running|CUDA allocator|start-up|engine ready" $OUT/serve3b_ts_$run.log | cut -c1-200
done
date -u
cmake -S .peer/llama.cpp -B /tmp/lcpp-cpu -DGGML_CUDA=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DCMAKE_BUILD_TYPE=Release > $OUT/cmake.log 2>&1 || tail -20 $OUT/cmake.log
cmake --build /tmp/lcpp-cpu -j16 --target llama-quantize > $OUT/build.log 2>&1; tail -2 $OUT/build.log; date -u
PEER=.peer python3 .devbench/s27/make_model.py 8b /tmp/l8b.gguf; date -u
/tmp/lcpp-cpu/bin/llama-quantize /tmp/l8b.gguf /tmp/l8b-Q4_K_M.gguf Q4_K_M 16 > $OUT/quantize.log 2>&1; tail -3 $OUT/quantize.log
rm -f /tmp/l8b.gguf; ls -la /tmp/l8b*.gguf; date -u
