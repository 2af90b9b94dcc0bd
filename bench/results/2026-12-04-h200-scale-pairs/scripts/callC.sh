#!/usr/bin/env bash
# Call C (the machine still warm from call B): the llama-quantize Q4_K_M file in llama.cpp
# (llama-batched-bench) and kvspill (profile_decode, the scale pairs on), 1 / 8 / 32 x 2K; then the
# random-weight 32 x 2K and 8K batch-1 rows (moved here from call B, which ran near the 600 s limit).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh callC
F=/tmp/l8b-Q4_K_M.gguf
[ -f $F ] || timeout 200 bash -c "SHAPE=8b QUANT=Q4_K_M bash .peer/llamacpp_peer.sh model" 2>&1 | tail -3 | tee -a $L
ls -la $F | tee -a $L
SHAPE=8b QUANT=Q4_K_M NPL=1,8,32 NPP=2048 NGEN=128 OUT=$OUT PEER=.peer T_BATCHED=150 bash .peer/llamacpp_peer.sh batched 2>&1 | tee -a $L
echo "llama.cpp done at $(( $(date +%s) - T0 )) s" | tee -a $L
for c in 1 8 32; do
  timeout 70 python3 -m kvspill.bench.profile_decode --model $F --ctx 2048 --concurrency $c --steps 100 --kv-cache-memory 12GiB > $OUT/prof_c$c.txt 2>&1
  echo "c$c rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/prof_c$c.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $L
done
Q="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048"
timeout 60 python3 -m kvspill.bench.profile_decode $Q --concurrency 32 > $OUT/prof_q32x2k.txt 2>&1
echo "random q32x2k rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/prof_q32x2k.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $L
timeout 60 python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192 > $OUT/prof_q8k.txt 2>&1
echo "random q8k rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/prof_q8k.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $L
(cd $OUT && tar czf profC.tgz prof_*.txt && rm -f prof_*.txt)
echo "call C done at $(( $(date +%s) - T0 )) s" | tee -a $L
