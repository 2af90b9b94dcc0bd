#!/usr/bin/env bash
# Call H: `kvspill bench serve` at concurrency 1 / 8 / 32 on the random 8B Q4_K_M file, 16 GiB (the committed tree).
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=bench/results/2026-12-04-h200-rope-in-decode/scripts; L=$OUT/callH.log; F=/tmp/l8b-Q4_K_M.gguf
{ date -u; git log --oneline | head -1; git status --short | head -5; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 120 python3 $S/q4km_file.py $F > $OUT/file.log 2>&1; echo "file rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > $OUT/smi.txt &
SMI=$!
python3 -m kvspill serve --model $F --vram-budget 16GiB --max-model-len 4096 --port 8100 > $OUT/serve.log 2>&1 &
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
(cd $OUT && tar czf serveH.tgz serve_c*.txt smi.txt && rm -f serve_c*.txt smi.txt)
echo "call H done at $(( $(date +%s) - T0 )) s" | tee -a $L
