#!/usr/bin/env bash
# Session 27 call D2 (right after D1, same machine): the 8B-shaped Q4_K_M GGUF written by
# llama-quantize, served with --vram-budget 16GiB and no other flag: kvspill plan's view, the tiers
# start-up chose, /health, first vs later TTFT, a 100K-token request, nvidia-smi's peak.
set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; ls -la /tmp/l8b-Q4_K_M.gguf
python3 -m kvspill plan /tmp/l8b-Q4_K_M.gguf --vram-budget 16GiB > $OUT/plan8b.txt 2>&1; grep -E "^(GPU|CPU|disk) KV|^context|^fits" $OUT/plan8b.txt
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > $OUT/smi_8b.log &
SMI=$!
export START=$(date +%s.%N)
(python3 -m kvspill serve /tmp/l8b-Q4_K_M.gguf --vram-budget 16GiB --port 8101 2>&1 | python3 .devbench/s27/ts.py > $OUT/serve8b.log) &
timeout 300 python3 .devbench/s27/client.py 8101 wait
timeout 120 python3 .devbench/s27/client.py 8101 ttft 7
timeout 420 python3 .devbench/s27/client.py 8101 long 100000
pkill -TERM -f "kvspill serve"; sleep 5; kill $SMI
grep -E "memory|start-up|KV tiers|over the|KV pool|engine ready|Uvicorn running" $OUT/serve8b.log | cut -c1-260
python3 -c "v=[int(x) for x in open('$OUT/smi_8b.log') if x.strip().isdigit()]; print('nvidia-smi peak MiB', max(v), 'of the budget', 16*1024, 'samples', len(v))"
date -u
