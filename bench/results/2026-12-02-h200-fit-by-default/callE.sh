#!/usr/bin/env bash
# Session 27 call E: random:llama-8b:q4_k (Q4_K blocks, random) served with --vram-budget 16GiB and
# no other flag, after the capture fix: start-up, first vs later TTFT, a 100K-token request, peak.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > $OUT/smi.log &
SMI=$!
export START=$(date +%s.%N)
(python3 -m kvspill serve --model random:llama-8b:q4_k --vram-budget 16GiB --port 8102 2>&1 | python3 .devbench/s27/ts.py > $OUT/serve8bq.log) &
timeout 70 python3 .devbench/s27/client.py 8102 wait
timeout 20 python3 .devbench/s27/client.py 8102 ttft 5
timeout 50 python3 .devbench/s27/client.py 8102 long 100000
pkill -TERM -f "kvspill serve"; sleep 3; kill $SMI
grep -E "memory:|start-up|KV tiers|over the|Error|error" $OUT/serve8bq.log | cut -c1-250 | head -8
python3 -c "v=[int(x) for x in open('$OUT/smi.log') if x.strip().isdigit()]; print('nvidia-smi peak MiB', max(v), 'of', 16*1024)"
