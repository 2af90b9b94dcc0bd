#!/usr/bin/env bash
# Call B (warm machine after callA.sh): the same Q4_K_M file in llama.cpp and kvspill, one call; kvspill's
# batched rows with x copied (words_x) and x in place; `kvspill bench serve` c1/8/32 on the file.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s46; L=$OUT/callB.log; F=/tmp/l8b-Q4_K_M.gguf
{ date -u; git log --oneline | head -1; ls -la $F; } | tee -a $L
[ -f $F ] || { echo "no $F"; exit 1; }
[ -f /tmp/inplace.json ] || python3 $S/inplace_configs.py /tmp/inplace.json
SHAPE=8b QUANT=Q4_K_M DEPTHS_GPU=8192,32768 NGEN=64 OUT=$OUT PEER=.peer T_GPU=110 bash $S/llamacpp_peer.sh bench 2>&1 | tee -a $L
SHAPE=8b QUANT=Q4_K_M NPL=1,8,16,32 NPP=2048 NGEN=128 OUT=$OUT PEER=.peer T_BATCHED=140 bash $S/llamacpp_peer.sh batched 2>&1 | tee -a $L
echo "llama.cpp done at $(( $(date +%s) - T0 )) s" | tee -a $L
timeout 120 python3 -m kvspill.bench --model $F --vram-budget 16GiB --ctx 8192 32768 --new-tokens 64 --out $OUT/w4_kvspill.jsonl > $OUT/w4.log 2>&1
echo "w4 rc $?" | tee -a $L; grep -vE "^\s*$" $OUT/w4.log | tail -3 | cut -c1-400 | tee -a $L
for c in 1 8 16 32; do
  for v in copy; do
    [ $c = 1 ] && [ $v = inplace ] && continue
    if [ $v = inplace ]; then E="KVSPILL_MMA_CONFIGS=/tmp/inplace.json"; else E=""; fi
    env $E timeout 50 python3 -m kvspill.bench.profile_decode --model $F --ctx 2048 --concurrency $c --steps 100 --kv-cache-memory 12GiB > $OUT/prof_c${c}_$v.txt 2>&1
    echo "$v c$c rc $?: $(grep engine.step $OUT/prof_c${c}_$v.txt)" | tee -a $L
  done
done
(cd $OUT && tar czf profB.tgz prof_c*.txt && rm -f prof_c*.txt)
echo "kvspill done at $(( $(date +%s) - T0 )) s" | tee -a $L
[ $(( $(date +%s) - T0 )) -lt 400 ] || { echo "no time for serve"; exit 0; }
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > $OUT/smi.txt &
SMI=$!
python3 -m kvspill serve --model $F --vram-budget 16GiB --max-model-len 4096 --port 8100 > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 90); do python3 -c "import urllib.request;urllib.request.urlopen('http://127.0.0.1:8100/health')" 2>/dev/null && break; sleep 1; done
echo "server up after $i s (at $(( $(date +%s) - T0 )) s)" | tee -a $L
for c in 1 8 32; do
  n=$((c * 3)); [ $c = 1 ] && n=4
  [ $(( $(date +%s) - T0 )) -lt 540 ] || break
  timeout 60 python3 -m kvspill bench serve --url http://127.0.0.1:8100 --concurrency $c --num-requests $n \
    --prompt-len 2048 --max-tokens 128 --max-token-id 30000 --out $OUT/bench_serve.jsonl > $OUT/serve_c$c.txt 2>&1
  echo "c$c rc $?" | tee -a $L; tail -12 $OUT/serve_c$c.txt | tee -a $L
done
kill -TERM $SP; wait $SP; kill $SMI
echo "card peak MiB $(sort -n $OUT/smi.txt | tail -1)" | tee -a $L
grep -E "KV pool|step failed|out of memory|Traceback" $OUT/serve.log | cut -c1-250 | head -6 | tee -a $L
echo "call B done at $(( $(date +%s) - T0 )) s" | tee -a $L
