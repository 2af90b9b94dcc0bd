#!/usr/bin/env bash
# Call B (the warm machine after callA.sh): the same Q4_K_M file in llama.cpp and kvspill, one call.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callB.log; F=/tmp/l8b-Q4_K_M.gguf
{ date -u; git log --oneline | head -1; ls -la $F; } | tee -a $L
[ -f $F ] || { echo "no $F: the machine was not the warm one"; exit 1; }
[ -x /tmp/lcpp-build/bin/llama-bench ] || { echo "no llama-bench"; PEER=.peer bash .peer/llamacpp_peer.sh build 2>&1 | tail -2; }
SHAPE=8b QUANT=Q4_K_M DEPTHS_GPU=8192,32768 NGEN=64 OUT=$OUT PEER=.peer T_GPU=110 bash .peer/llamacpp_peer.sh bench 2>&1 | tee -a $L
SHAPE=8b QUANT=Q4_K_M NPL=1,8,16,32 NPP=2048 NGEN=128 OUT=$OUT PEER=.peer T_BATCHED=140 bash .peer/llamacpp_peer.sh batched 2>&1 | tee -a $L
echo "llama.cpp done at $(( $(date +%s) - T0 )) s" | tee -a $L
timeout 120 python3 -m kvspill.bench --model $F --vram-budget 16GiB --ctx 8192 32768 --new-tokens 64 --out $OUT/w4_kvspill.jsonl > $OUT/w4.log 2>&1
echo "w4 rc $?" | tee -a $L; grep -vE "^\s*$" $OUT/w4.log | tail -3 | cut -c1-400 | tee -a $L
for c in 1 8 16 32; do
  timeout 50 python3 -m kvspill.bench.profile_decode --model $F --ctx 2048 --concurrency $c --steps 100 --kv-cache-memory 12GiB > $OUT/prof_c$c.txt 2>&1
  echo "c$c rc $?: $(grep -E 'engine.step|plan ' $OUT/prof_c$c.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
done
echo "kvspill file rows done at $(( $(date +%s) - T0 )) s" | tee -a $L
# W3 at 32K (24 GiB + 40 GiB RAM), the performance.md row, the fused path off and on
for f in 0 1; do
  [ $(( $(date +%s) - T0 )) -lt 470 ] || break
  KVSPILL_FUSED_ROPE_DECODE=$f timeout 110 python3 -m kvspill.bench --shape llama-8b --vram-budget 24GiB --cpu-kv-budget 40GiB --ctx 32768 --out $OUT/w3_f$f.jsonl > $OUT/w3_f$f.log 2>&1
  echo "w3 f$f rc $?: $(grep -o '"decode_tok_s": [0-9.]*' $OUT/w3_f$f.jsonl | head -2 | tr '\n' ' ')" | tee -a $L
done
(cd $OUT && tar czf profB.tgz prof_c*.txt w3_f*.log && rm -f prof_c*.txt w3_f*.log)
echo "call B done at $(( $(date +%s) - T0 )) s" | tee -a $L
