#!/usr/bin/env bash
# Call I: `kvspill bench serve` at concurrency 1 / 8 / 32 on the random 8B Q4_K_M shape, 16 GiB (the
# committed tree). Not the file: its synthetic 128K-token SPM vocab takes transformers' GGUF
# tokenizer conversion about 12 minutes (call H's server was still converting at 150 s).
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callI.log
{ date -u; git log --oneline | head -1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > $OUT/smi.txt &
SMI=$!
python3 -m kvspill serve --model random:llama-8b:q4_k_m --vram-budget 16GiB --max-model-len 4096 --port 8100 > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 90); do python3 -c "import urllib.request;urllib.request.urlopen('http://127.0.0.1:8100/health')" 2>/dev/null && break; sleep 1; done
echo "server up after $i s (at $(( $(date +%s) - T0 )) s)" | tee -a $L
for c in 1 8 32; do
  n=$((c * 3)); [ $c = 1 ] && n=4
  timeout 40 python3 -m kvspill bench serve --url http://127.0.0.1:8100 --concurrency $c --num-requests $n \
    --prompt-len 2048 --max-tokens 128 --max-token-id 30000 --out $OUT/bench_serve.jsonl > $OUT/serve_c$c.txt 2>&1
  echo "c$c rc $?" | tee -a $L; tail -9 $OUT/serve_c$c.txt | head -7 | tee -a $L
done
kill -TERM $SP; wait $SP; kill $SMI
echo "card peak MiB $(sort -n $OUT/smi.txt | tail -1)" | tee -a $L
grep -E "KV pool|step failed|out of memory|Traceback" $OUT/serve.log | cut -c1-250 | head -6 | tee -a $L
(cd $OUT && tar czf serveI.tgz serve_c*.txt smi.txt && rm -f serve_c*.txt smi.txt)
echo "call I done at $(( $(date +%s) - T0 )) s" | tee -a $L
