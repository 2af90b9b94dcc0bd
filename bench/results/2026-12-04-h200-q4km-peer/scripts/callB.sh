#!/usr/bin/env bash
# Call B (warm machine after callA.sh): the same Q4_K_M file in llama.cpp and kvspill, one call.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s45; L=$OUT/callB.log; F=/tmp/l8b-Q4_K_M.gguf
{ date -u; git log --oneline | head -1; ls -la $F; } | tee -a $L
[ -f $F ] || { echo "no $F"; exit 1; }
SHAPE=8b QUANT=Q4_K_M DEPTHS_GPU=8192,32768 NGEN=64 OUT=$OUT PEER=.peer T_GPU=110 bash $S/llamacpp_peer.sh bench 2>&1 | tee -a $L
SHAPE=8b QUANT=Q4_K_M NPL=1,8,16,32 NPP=2048 NGEN=128 OUT=$OUT PEER=.peer T_BATCHED=140 bash $S/llamacpp_peer.sh batched 2>&1 | tee -a $L
echo "llama.cpp done at $(( $(date +%s) - T0 )) s" | tee -a $L
timeout 120 python3 -m kvspill.bench --model $F --vram-budget 16GiB --ctx 8192 32768 --new-tokens 64 --out $OUT/w4_kvspill.jsonl > $OUT/w4.log 2>&1
echo "w4 rc $?" | tee -a $L; grep -vE "^\s*$" $OUT/w4.log | tail -3 | cut -c1-400 | tee -a $L
for c in 1 8 16 32; do
  timeout 50 python3 -m kvspill.bench.profile_decode --model $F --ctx 2048 --concurrency $c --steps 100 --kv-cache-memory 12GiB > $OUT/prof_c$c.txt 2>&1
  echo "c$c rc $?: $(grep engine.step $OUT/prof_c$c.txt)" | tee -a $L
done
(cd $OUT && tar czf profB.tgz prof_c*.txt && rm -f prof_c*.txt)
echo "call B done at $(( $(date +%s) - T0 )) s" | tee -a $L
