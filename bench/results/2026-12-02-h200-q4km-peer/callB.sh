#!/usr/bin/env bash
# Session 32 call B (warm machine after call A): the same Q4_K_M file in both engines, one call.
# llama.cpp: llama-bench decode at 8K / 32K, llama-batched-bench 1-32 x 2K. kvspill: the engine bench
# at 8K / 32K, concurrent_bench 1-32 x 2K, kernel tables (1 x 8K, 8 x 2K), bench serve c1/c8/c32.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s32; L=$OUT/callB.log; F=/tmp/l8b-Q4_K_M.gguf
{ date -u; cat $S/COMMIT; ls -la $F; } | tee -a $L
[ -f $F ] || { echo "no $F"; exit 1; }
SHAPE=8b QUANT=Q4_K_M DEPTHS_GPU=8192,32768 NGEN=64 OUT=$OUT PEER=.peer T_GPU=120 bash $S/llamacpp_peer.sh bench 2>&1 | tee -a $L
SHAPE=8b QUANT=Q4_K_M NPL=1,2,4,8,16,32 NPP=2048 NGEN=128 OUT=$OUT PEER=.peer T_BATCHED=150 bash $S/llamacpp_peer.sh batched 2>&1 | tee -a $L
echo "llama.cpp done at $(( $(date +%s) - T0 )) s" | tee -a $L
timeout 150 python3 -m kvspill.bench --model $F --vram-budget 16GiB --ctx 8192 32768 --new-tokens 64 --out $OUT/w4_kvspill.jsonl > $OUT/w4.log 2>&1
echo "w4 rc $?" | tee -a $L; grep -vE "^\s*$" $OUT/w4.log | tail -4 | cut -c1-300 | tee -a $L
timeout 150 python3 -m kvspill.bench.concurrent_bench --model $F --vram-budget 16GiB --ctx 2048 --concurrency 1 2 4 8 16 32 \
  --new-tokens 64 --out $OUT/w6_kvspill.jsonl > $OUT/w6.log 2>&1
echo "w6 rc $?" | tee -a $L
python3 -c "
import json
for l in open('$OUT/w6_kvspill.jsonl'):
    r=json.loads(l); i=r.get('itl_ms') or {}
    print('w6', r['concurrency'], r.get('ok'), 'decode', r.get('decode_tok_s'), 'out', r.get('output_tok_s'), 'itl p50/p99', round(i.get('p50') or 0,2), round(i.get('p99') or 0,2), 'floor', r.get('floor_ratio'))" | tee -a $L
echo "engine benches done at $(( $(date +%s) - T0 )) s" | tee -a $L
timeout 90 python3 -m kvspill.bench.profile_decode --model $F --ctx 8192 --steps 200 --kernels 20 > $OUT/prof_8k.txt 2>&1; echo "prof rc $?" | tee -a $L
timeout 90 python3 $S/prof_batch.py $F 16GiB 8 2048 > $OUT/prof_b8.txt 2>&1; echo "prof b8 rc $?" | tee -a $L
grep -E "steps on|graph GPU|step .* ms" $OUT/prof_8k.txt $OUT/prof_b8.txt | tee -a $L
if [ $(( $(date +%s) - T0 )) -lt 420 ]; then
  python3 -m kvspill serve --model $F --skip-tokenizer-init --vram-budget 16GiB --max-model-len 4096 --port 8100 > $OUT/serve.log 2>&1 &
  P=$!
  for i in $(seq 120); do python3 -c "import urllib.request;urllib.request.urlopen('http://127.0.0.1:8100/health')" 2>/dev/null && break; sleep 1; done
  for c in 1 8 32; do
    timeout 45 python3 -m kvspill bench serve --url http://127.0.0.1:8100 --concurrency $c --num-requests $((c * 3)) \
      --prompt-len 2048 --max-tokens 64 --max-token-id 30000 --out $OUT/bench_serve.jsonl 2>&1 | head -6 | tee -a $L
  done
  kill -TERM $P; wait $P
fi
echo "call B done at $(( $(date +%s) - T0 )) s" | tee -a $L
cd $OUT && tar -czf b.tgz *.log *.txt *.jsonl *.err 2>/dev/null
