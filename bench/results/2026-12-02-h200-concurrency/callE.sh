#!/usr/bin/env bash
# Session 28 call E, from a clean export of HEAD (.devbench/clean): bench serve at concurrency 32
# after the waiting-bound fix (issue 55); the pinned-prefix W3 run (issue 52); the A/B offload
# compare (issue 53).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 1; }
ROOT=$PWD
cd .devbench/clean
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; git -C $ROOT log --oneline -1 2>/dev/null
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > /tmp/smi_serve.txt &
SMI=$!
START=$(date +%s.%N)
python3 -m kvspill serve --model random:llama-8b:q4_k --vram-budget 16GiB --max-model-len 4096 --port 8100 > $OUT/serve.log 2>&1 &
P=$!
START=$START timeout 100 python3 $ROOT/.devbench/s27/client.py 8100 wait
timeout 100 python3 -m kvspill bench serve --url http://127.0.0.1:8100 --concurrency 32 --num-requests 96 \
  --prompt-len 2048 --max-tokens 64 --max-token-id 30000 --out $OUT/bench_serve.jsonl 2>/dev/null | tail -9
kill -TERM $P; wait $P
kill $SMI
echo "serve smi peak MiB $(sort -n /tmp/smi_serve.txt | tail -1)"
grep -E "KV pool|step failed|over the|out of memory|waiting" $OUT/serve.log | cut -c1-250 | head -6
date -u
timeout 190 python3 -m kvspill.bench.kv_pin_bench --shape llama-8b --vram-budget 24GiB --cpu-kv-budget 40GiB \
  --ctx 64K --out $OUT/kv_pin.jsonl > $OUT/kv_pin.log 2>&1
echo "kv_pin rc $?"; tail -3 $OUT/kv_pin.log | cut -c1-1500
date -u
timeout 220 python3 -m kvspill bench compare --model random:llama-8b --configs weights-resident,weights-offload \
  --contexts 4K,16K --new-tokens 64 --out $OUT/ab --data-dir /tmp/kvreg > $OUT/ab.log 2>&1
echo "ab rc $?"; tail -25 $OUT/ab.log | cut -c1-300
date -u
