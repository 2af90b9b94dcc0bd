#!/usr/bin/env bash
# Session 29 call B: serve start-up under importtime and cProfile (issue 50); mixed-step profiles
# (issue 55's ITL); then llama-quantize (CPU-only build) and the 8B Q4_K_M model for call C.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 1; }
ROOT=$PWD; S=$ROOT/.devbench/s29
cd .devbench/clean
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/b
date -u
export START=$(date +%s.%N)
python3 -X importtime -m kvspill serve --model random:llama-3b --max-model-len 32768 --port 8100 > $OUT/b/serve_it.log 2> $OUT/b/serve_importtime.txt &
timeout 120 python3 $ROOT/.devbench/s27/client.py 8100 wait
pkill -TERM -f "kvspill serve"; sleep 3
export START=$(date +%s.%N)
python3 -m cProfile -o $OUT/b/serve.prof -m kvspill serve --model random:llama-3b --max-model-len 32768 --port 8100 > $OUT/b/serve_prof.log 2>&1 &
timeout 120 python3 $ROOT/.devbench/s27/client.py 8100 wait
pkill -TERM -f "kvspill serve"; sleep 4
python3 -c "
import pstats; p=pstats.Stats('$OUT/b/serve.prof'); p.sort_stats('cumulative').print_stats(45)" > $OUT/b/serve_prof_top.txt 2>&1
grep -E "kvspill|uvicorn|fastapi|typer" $OUT/b/serve_prof_top.txt | head -40 | cut -c1-200
date -u
timeout 100 python3 $S/prof_mixed.py llama-3b 16GiB > $OUT/b/prof_3b.txt 2>&1; echo "prof 3b rc $?"; head -1 $OUT/b/prof_3b.txt | tail -c 400
timeout 120 python3 $S/prof_mixed.py llama-8b:q4_k 16GiB > $OUT/b/prof_q4k.txt 2>&1; echo "prof q4k rc $?"; head -1 $OUT/b/prof_q4k.txt | tail -c 400
date -u
cmake -S $ROOT/.peer/llama.cpp -B /tmp/lcpp-cpu -DGGML_CUDA=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DCMAKE_BUILD_TYPE=Release > $OUT/b/cmake.log 2>&1 || tail -20 $OUT/b/cmake.log
cmake --build /tmp/lcpp-cpu -j16 --target llama-quantize > $OUT/b/build.log 2>&1; tail -2 $OUT/b/build.log; date -u
PEER=$ROOT/.peer python3 $ROOT/.devbench/s27/make_model.py 8b /tmp/l8b.gguf; date -u
/tmp/lcpp-cpu/bin/llama-quantize /tmp/l8b.gguf /tmp/l8b-Q4_K_M.gguf Q4_K_M 16 > $OUT/b/quantize.log 2>&1; tail -3 $OUT/b/quantize.log
rm -f /tmp/l8b.gguf; ls -la /tmp/l8b*.gguf; date -u
tar -czf $OUT/b.tgz -C $OUT b --exclude='*.json'
