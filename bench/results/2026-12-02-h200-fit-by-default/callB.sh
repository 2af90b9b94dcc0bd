#!/usr/bin/env bash
# Session 27 call B (right after A, same machine): the 8B Q4_K_M GGUF served with --vram-budget 16GiB
# and no other flag: the tiers chosen, /health time, first vs later TTFT, a 100K-token request,
# nvidia-smi's peak; then a 3B start-up on a quiet host.
set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u
ls -la /tmp/l8b*.gguf; date -u
rm -f /tmp/l8b.gguf
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > $OUT/smi_8b.log &
SMI=$!
START=$(date +%s.%N)
python3 -m kvspill serve /tmp/l8b-Q4_K_M.gguf --vram-budget 16GiB --port 8101 > $OUT/serve8b.log 2>&1 &
P=$!
START=$START timeout 300 python3 .devbench/s27/client.py 8101 wait
timeout 120 python3 .devbench/s27/client.py 8101 ttft 7
timeout 400 python3 .devbench/s27/client.py 8101 long 100000
kill -TERM $P; wait $P; kill $SMI
grep -E "memory|start-up|KV tiers|over the|KV pool" $OUT/serve8b.log | tail -8
python3 -c "import sys; v=[int(x) for x in open('$OUT/smi_8b.log') if x.strip().isdigit()]; print('nvidia-smi peak MiB', max(v), 'of budget', 16*1024)"
START=$(date +%s.%N)
python3 -m kvspill serve --model random:llama-3b --max-model-len 32768 --port 8100 > $OUT/serve3b_quiet.log 2>&1 &
P=$!
START=$START timeout 300 python3 .devbench/s27/client.py 8100 wait
timeout 120 python3 .devbench/s27/client.py 8100 ttft 3
kill -TERM $P; wait $P
grep -E "start-up" $OUT/serve3b_quiet.log | tail -2
date -u
