#!/usr/bin/env bash
# Call 2 (warm after call 1): the llama-quantize Q4_K_M file in llama.cpp and kvspill, one call:
# llama-bench at 8K and 32K, llama-batched-bench at 1 / 8 / 32 x 2K; kvspill.bench at 8K and 32K
# and profile_decode at 1 / 8 / 32 x 2K with KVSPILL_Q6K_SPLIT=$SPLIT (argv[1]).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call2
export KVSPILL_Q6K_SPLIT=$1; F=/tmp/l8b-Q4_K_M.gguf
echo "KVSPILL_Q6K_SPLIT=$KVSPILL_Q6K_SPLIT" | tee -a $L
[ -f $F ] || timeout 200 bash -c "SHAPE=8b QUANT=Q4_K_M bash .peer/llamacpp_peer.sh model" 2>&1 | tail -3 | tee -a $L
ls -la $F | tee -a $L
SHAPE=8b QUANT=Q4_K_M DEPTHS_GPU=8192,32768 NGEN=64 OUT=$OUT PEER=.peer T_GPU=110 bash .peer/llamacpp_peer.sh bench 2>&1 | tee -a $L
SHAPE=8b QUANT=Q4_K_M NPL=1,8,32 NPP=2048 NGEN=128 OUT=$OUT PEER=.peer T_BATCHED=140 bash .peer/llamacpp_peer.sh batched 2>&1 | tee -a $L
echo "llama.cpp done at $(( $(date +%s) - T0 )) s" | tee -a $L
timeout 130 python3 -m kvspill.bench --model $F --vram-budget 16GiB --ctx 8192 32768 --new-tokens 64 --out $OUT/w4_kvspill.jsonl > $OUT/w4.log 2>&1
echo "w4 rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L; grep -vE "^\s*$" $OUT/w4.log | tail -3 | cut -c1-400 | tee -a $L
for c in 1 8 32; do
  timeout 60 python3 -m kvspill.bench.profile_decode --model $F --ctx 2048 --concurrency $c --steps 100 --kv-cache-memory 12GiB > $OUT/prof_c$c.txt 2>&1
  echo "c$c rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/prof_c$c.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-260)" | tee -a $L
done
# the step's kernel tables, file and random weights (the file's batch-1 step was 18% slower in 2026-12-04-h200-q4km-peer)
timeout 60 python3 -m kvspill.bench.profile_decode --model $F --ctx 2048 --steps 100 --kv-cache-memory 12GiB --kernels 40 > $OUT/prof_k_file.txt 2>&1
echo "kernels file rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L
timeout 60 python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --ctx 2048 --steps 100 --kv-cache-memory 12GiB --kernels 40 > $OUT/prof_k_random.txt 2>&1
echo "kernels random rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step' $OUT/prof_k_random.txt | tr -s ' ')" | tee -a $L
(cd $OUT && tar czf prof2.tgz prof_*.txt w4.log && rm -f prof_*.txt w4.log)
echo "call 2 done at $(( $(date +%s) - T0 )) s" | tee -a $L
