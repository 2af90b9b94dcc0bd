#!/usr/bin/env bash
# `kvspill bench serve` at concurrency 1 / 8 / 32 on the random 8B Q4_K_M shape, 16 GiB (2K
# prompts, 128 tokens out; as ../../2026-12-04-h200-rope-in-decode/scripts/callI.sh), then the W3
# 128K fp8 `stream` row before issue 54 (dad9dea) and now, alternated. Carry .whl; about 350 s.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/serve_fp8stream.log
{ date -u; git log --oneline | head -1; git status --short | grep -v "^??" | head -5; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > $OUT/smi.txt &
SMI=$!
python3 -m kvspill serve --model random:llama-8b:q4_k_m --vram-budget 16GiB --max-model-len 4096 --port 8100 > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 120); do python3 -c "import urllib.request;urllib.request.urlopen('http://127.0.0.1:8100/health')" 2>/dev/null && break; sleep 1; done
echo "server up after $i s (at $(( $(date +%s) - T0 )) s)" | tee -a $L
for c in 1 8 32; do
  n=$((c * 3)); [ $c = 1 ] && n=4
  timeout 60 python3 -m kvspill bench serve --url http://127.0.0.1:8100 --concurrency $c --num-requests $n \
    --prompt-len 2048 --max-tokens 128 --max-token-id 30000 --out $OUT/bench_serve.jsonl > $OUT/serve_c$c.txt 2>&1
  echo "c$c rc $?" | tee -a $L; tail -9 $OUT/serve_c$c.txt | head -7 | tee -a $L
done
kill -TERM $SP; wait $SP; kill $SMI
echo "card peak MiB $(sort -n $OUT/smi.txt | tail -1)" | tee -a $L
grep -E "KV pool|step failed|out of memory|Traceback" $OUT/serve.log | cut -c1-250 | head -6 | tee -a $L
(cd $OUT && tar czf serve.tgz serve_c*.txt smi.txt serve.log && rm -f serve_c*.txt smi.txt serve.log)
OLD=/tmp/old54; mkdir -p $OLD && git archive dad9dea kvspill pyproject.toml | tar -x -C $OLD || { echo "no old tree" | tee -a $L; exit 1; }
run() {  # timeout dir mode args...
  local left=$(( 575 - ($(date +%s) - T0) ))
  [ $left -lt $1 ] && { echo "skip $3 ($left s left)" | tee -a $L; return; }
  echo "== $2 $3 at $(( $(date +%s) - T0 )) s" | tee -a $L
  (cd $2 && PYTHONPATH=/tmp/site:$PWD timeout $1 python3 -m kvspill.bench "${@:4}" --mode $3 --out $OUT/rows.jsonl > $OUT/$3.log 2>&1)
  echo "rc $?: $(grep -v Warning $OUT/$3.log | tail -1 | cut -c1-200)" | tee -a $L
}
A="--shape llama-8b --vram-budget 24GiB --cpu-kv-budget 40GiB --new-tokens 32 --ctx 131072 --cold-attention stream --kv-cache-dtype fp8"
run 100 . new-w3-fp8-stream $A
run 100 $OLD old-w3-fp8-stream $A
python3 - <<'PY' | tee -a $L
import json, os
for l in open(os.environ["OUT"] + "/rows.jsonl"):
    d = json.loads(l)
    print(d["mode"], d["ctx"], d["decode_tok_s"], d.get("ttft_s"), d.get("plan_decode_tok_s"), d.get("gpu_kv_gib"), d.get("cold_tokens"), d.get("peak_gpu_reserved_gib"))
PY
(cd $OUT && tar czf logs.tgz *-*.log && rm -f old-*.log new-*.log)
echo "serve_fp8stream done at $(( $(date +%s) - T0 )) s" | tee -a $L
