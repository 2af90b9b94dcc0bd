#!/usr/bin/env bash
# fp8 one-token tiles (committed) on the card; `kvspill bench serve` c1/c8/c32 on random llama-8b Q4_K_M at 16 GiB.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callI.log; P=$OUT/prof.txt; S=.devbench/s39
{ date -u; git log --oneline | head -1; git status --short | head -5; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 60 python3 $S/fp8_check.py 2>&1 | tee -a $L
for shape in llama-8b:fp8 llama-8b; do
  echo "== $shape" >> $P; timeout 60 python3 -m kvspill.bench.profile_decode --shape $shape --ctx 8192 --steps 100 --kv-cache-memory 8GiB >> $P 2>&1
  echo "$shape rc $?: $(grep engine.step $P | tail -1)" | tee -a $L
done
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > $OUT/smi.txt &
SMI=$!
python3 -m kvspill serve --model random:llama-8b:q4_k_m --vram-budget 16GiB --max-model-len 4096 --port 8100 > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 150); do python3 -c "import urllib.request;urllib.request.urlopen('http://127.0.0.1:8100/health')" 2>/dev/null && break; sleep 1; done
echo "server up after $i s (at $(( $(date +%s) - T0 )) s)" | tee -a $L
for c in 1 8 32; do
  n=$((c * 3)); [ $c = 1 ] && n=4
  timeout 90 python3 -m kvspill bench serve --url http://127.0.0.1:8100 --concurrency $c --num-requests $n \
    --prompt-len 2048 --max-tokens 128 --max-token-id 30000 --out $OUT/bench_serve.jsonl > $OUT/serve_c$c.txt 2>&1
  echo "c$c rc $?" | tee -a $L; tail -12 $OUT/serve_c$c.txt | tee -a $L
done
kill -TERM $SP; wait $SP; kill $SMI
echo "card peak MiB $(sort -n $OUT/smi.txt | tail -1)" | tee -a $L
grep -E "KV pool|step failed|out of memory|Traceback" $OUT/serve.log | cut -c1-250 | head -6 | tee -a $L
echo "call I done at $(( $(date +%s) - T0 )) s" | tee -a $L
