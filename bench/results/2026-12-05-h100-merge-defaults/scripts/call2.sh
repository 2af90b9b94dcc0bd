#!/usr/bin/env bash
# Call 2 (the machine of call 1, warm: llama.cpp built, /tmp/l8b-Q4_K_M.gguf written): issue 54's
# rows in one call on the committed defaults: the file in llama.cpp (llama-bench 8K / 32K,
# llama-batched-bench 1 / 8 / 32 x 2K) and kvspill; fp8 / bf16 8B at 8K; W1 through kvspill.bench;
# then the two open defaults of ../../2026-12-05-q5k-mma/scripts/next_call.sh (Q5_K tensor cores,
# Q4_1 int16-x lanes).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call2
F=/tmp/l8b-Q4_K_M.gguf
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
prof() {  # name, limit, env..., -- profile_decode args
  local name=$1 lim=$2; shift 2; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
  timeout 90 env "${envs[@]}" python3 -m kvspill.bench.profile_decode "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-200)" | tee -a $L
}
ls -la $F /tmp/lcpp-build/bin/llama-bench 2>&1 | tee -a $L
if [ -f $F ]; then
  SHAPE=8b QUANT=Q4_K_M DEPTHS_GPU=8192,32768 NGEN=64 OUT=$OUT PEER=.peer T_GPU=60 bash .peer/llamacpp_peer.sh bench 2>&1 | tee -a $L
  SHAPE=8b QUANT=Q4_K_M NPL=1,8,32 NPP=2048 NGEN=128 OUT=$OUT PEER=.peer T_BATCHED=60 bash .peer/llamacpp_peer.sh batched 2>&1 | tee -a $L
  echo "llama.cpp done at $(( $(date +%s) - T0 )) s" | tee -a $L
  timeout 75 python3 -m kvspill.bench --model $F --vram-budget 16GiB --ctx 8192 32768 --new-tokens 64 --out $OUT/w4_kvspill.jsonl > $OUT/w4.txt 2>&1
  echo "w4 rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L; grep -E "tok/s|decode" $OUT/w4.txt | tail -4 | cut -c1-300 | tee -a $L
  for c in 1 8 32; do prof file_c$c 250 X=1 -- --model $F --ctx 2048 --concurrency $c --steps 100 --kv-cache-memory 12GiB; done
fi
prof fp8_8k 280 X=1 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
prof bf16_8k 310 X=1 -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
left 330 && { timeout 60 python3 -m kvspill.bench --shape llama-1b --vram-budget 16GiB --ctx 8192 --new-tokens 64 --out $OUT/w1_kvspill.jsonl > $OUT/w1.txt 2>&1; echo "w1 rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L; grep -E "tok/s|floor" $OUT/w1.txt | tail -3 | cut -c1-300 | tee -a $L; }
# next_call.sh's two defaults
Q=bench/results/2026-12-05-q5k-mma/scripts
left 380 && { timeout 90 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_gguf_int16x.py tests/kernels/test_gguf_mma.py -k "q5k or Q5_K or q41" > $OUT/pytest_q5.txt 2>&1; echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest_q5.txt)" | tee -a $L; }
for t in 8 32; do left 420 && timeout 45 python3 $Q/q5k_mma.py $t 2>&1 | tee -a $OUT/q5k_mma.jsonl $L > /dev/null; done
K="python3 -m kvspill.bench.kernels_gguf --types Q4_1 --tokens 1 --shapes qkv o gate_up down"
left 450 && { timeout 40 env KVSPILL_Q41_INT16X=1 $K > $OUT/q41_int16x.txt 2>&1; timeout 40 $K > $OUT/q41_generic.txt 2>&1; tail -6 $OUT/q41_int16x.txt $OUT/q41_generic.txt | tee -a $L; }
echo '{"Q5_K,8": {"block_n": 32, "num_warps": 2, "split_k": 4, "num_stages": 3, "magic": true}}' > /tmp/q5k_mma.json
prof q5_c8_mma 480 KVSPILL_MMA_CONFIGS=/tmp/q5k_mma.json -- --shape llama-8b:q5_k --kv-cache-memory 12GiB --ctx 2048 --concurrency 8 --steps 100
prof q5_c8_dot 510 X=1 -- --shape llama-8b:q5_k --kv-cache-memory 12GiB --ctx 2048 --concurrency 8 --steps 100
prof q41_on 540 KVSPILL_Q41_INT16X=1 -- --shape llama-8b:q4_1 --kv-cache-memory 16GiB --ctx 8192 --steps 100
prof q41_off 565 X=1 -- --shape llama-8b:q4_1 --kv-cache-memory 16GiB --ctx 8192 --steps 100
(cd $OUT && tar czf all2.tgz *.txt && rm -f *.txt)
echo "call 2 done at $(( $(date +%s) - T0 )) s" | tee -a $L
