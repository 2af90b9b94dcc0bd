#!/usr/bin/env bash
# Call C (the machine still warm from call B): the llama-quantize Q4_K_M file in llama.cpp
# (llama-batched-bench) and kvspill (profile_decode, the scale pairs on), 1 / 8 / 32 x 2K.
set -u
T0=$(date +%s)
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callC.log; F=/tmp/l8b-Q4_K_M.gguf
{ date -u; git log --oneline | head -1; } | tee -a $L
[ -f $F ] || timeout 200 bash -c "SHAPE=8b QUANT=Q4_K_M bash .peer/llamacpp_peer.sh model" 2>&1 | tail -3 | tee -a $L
ls -la $F | tee -a $L
SHAPE=8b QUANT=Q4_K_M NPL=1,8,32 NPP=2048 NGEN=128 OUT=$OUT PEER=.peer T_BATCHED=150 bash .peer/llamacpp_peer.sh batched 2>&1 | tee -a $L
echo "llama.cpp done at $(( $(date +%s) - T0 )) s" | tee -a $L
for c in 1 8 32; do
  timeout 70 python3 -m kvspill.bench.profile_decode --model $F --ctx 2048 --concurrency $c --steps 100 --kv-cache-memory 12GiB > $OUT/prof_c$c.txt 2>&1
  echo "c$c rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/prof_c$c.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $L
done
(cd $OUT && tar czf profC.tgz prof_c*.txt && rm -f prof_c*.txt)
echo "call C done at $(( $(date +%s) - T0 )) s" | tee -a $L
