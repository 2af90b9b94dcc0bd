#!/usr/bin/env bash
# Session 27 call C: where a 3B serve's 19 s to /health go (engine start-up itself: 2.8 s):
# every log line time-stamped from the command's start, twice (the second with warm caches).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u
python3 -X importtime -c "import kvspill.cli.main" 2> $OUT/importtime_cli_main_cold.txt
for run in 1 2; do
  START=$(date +%s.%N)
  (python3 -m kvspill serve --model random:llama-3b --max-model-len 32768 --port 8100 2>&1 | grep --line-buffered -v "GET /health" |
   while IFS= read -r line; do printf '%6.2f %s\n' "$(echo "$(date +%s.%N) - $START" | bc)" "$line"; done > $OUT/serve3b_ts_$run.log) &
  START=$START timeout 300 python3 .devbench/s27/client.py 8100 wait
  timeout 60 python3 .devbench/s27/client.py 8100 ttft $run
  pkill -TERM -f "kvspill serve"; sleep 3
  grep -vE "^ *[0-9.]+ +[A-Za-z /()@+-]*  +" $OUT/serve3b_ts_$run.log | head -30 | cut -c1-160
done
python3 -X importtime -c "import kvspill.cli.main, kvspill.cli.serve_cmd, kvspill.server, kvspill.engine.core" 2> $OUT/importtime_warm.txt
awk -F'|' '$2+0 > 400000' $OUT/importtime_warm.txt | tail -25
date -u
