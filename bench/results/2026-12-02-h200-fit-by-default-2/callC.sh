#!/usr/bin/env bash
# Session 29 call C (right after B, same machine): the 8B-shaped Q4_K_M GGUF written by llama-quantize,
# served with --vram-budget 16GiB and no other flag: plan, tiers chosen, /health, first vs later TTFT,
# a 100K-token request, nvidia-smi's peak over start-up and the run (issue 50).
set -u
ROOT=$PWD
cd .devbench/clean
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/c
date -u; ls -la /tmp/l8b-Q4_K_M.gguf || exit 1
python3 -m kvspill plan /tmp/l8b-Q4_K_M.gguf --vram-budget 16GiB > $OUT/c/plan8b.txt 2>&1; grep -E "KV|^context|fits|transient" $OUT/c/plan8b.txt | head -12
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > $OUT/c/smi_8b.log &
SMI=$!
export START=$(date +%s.%N)
(python3 -m kvspill serve /tmp/l8b-Q4_K_M.gguf --vram-budget 16GiB --port 8101 2>&1 | python3 $ROOT/.devbench/s27/ts.py > $OUT/c/serve8b.log) &
timeout 240 python3 $ROOT/.devbench/s27/client.py 8101 wait
timeout 120 python3 $ROOT/.devbench/s27/client.py 8101 ttft 7
timeout 300 python3 $ROOT/.devbench/s27/client.py 8101 long 100000
pkill -TERM -f "kvspill serve"; sleep 5; kill $SMI
grep -E "memory|start-up|KV tiers|over the|KV pool|engine ready|Uvicorn running|sized|context:" $OUT/c/serve8b.log | cut -c1-300
python3 -c "v=[int(x) for x in open('$OUT/c/smi_8b.log') if x.strip().isdigit()]; print('nvidia-smi peak MiB', max(v), 'of the budget', 16*1024, 'samples', len(v))"
date -u
tar -czf $OUT/c.tgz -C $OUT c
