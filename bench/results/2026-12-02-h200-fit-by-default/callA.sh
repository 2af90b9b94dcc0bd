#!/usr/bin/env bash
# Session 27 call A: llama.cpp build + the 8B Q4_K_M model in the background (niced); meanwhile
# the server's import times and two 3B start-ups (/health time, phases, first vs later TTFT).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2
(nice -n 19 env PEER=.peer bash .devbench/s27/llamacpp_peer.sh build > $OUT/lcpp_build.log 2>&1; echo build rc $? >> $OUT/lcpp_build.log;
 nice -n 19 env PEER=.peer SHAPE=8b QUANT=Q4_K_M bash .devbench/s27/llamacpp_peer.sh model > $OUT/lcpp_model.log 2>&1; echo model done >> $OUT/lcpp_model.log) &
python3 -X importtime -c "import kvspill.cli.serve_cmd" 2> $OUT/importtime_serve_cmd.txt
python3 -X importtime -c "import kvspill.server, kvspill.engine.core" 2> $OUT/importtime_server_engine.txt
for run in 1 2; do
  START=$(date +%s.%N)
  python3 -m kvspill serve --model random:llama-3b --max-model-len 32768 --port 8100 > $OUT/serve3b_$run.log 2>&1 &
  P=$!
  START=$START timeout 300 python3 .devbench/s27/client.py 8100 wait
  timeout 120 python3 .devbench/s27/client.py 8100 ttft $run
  kill -TERM $P; wait $P
  grep -E "start-up|memory:|over the|KV tiers" $OUT/serve3b_$run.log | tail -5
done
date -u; echo waiting for the llama.cpp build and model
wait
tail -3 $OUT/lcpp_build.log; tail -3 $OUT/lcpp_model.log; ls -la /tmp/l8b*.gguf
date -u
