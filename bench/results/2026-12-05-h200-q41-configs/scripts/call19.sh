#!/usr/bin/env bash
# Call 19 (prepared 2026-12-05 22:00, not run): the tree with calls 12-18's defaults (Q8_0 lanes,
# Q4_1 / Q5_K tensor-core entries at 3-32 tokens, dense tiles). On an H200: issue 54's rows in one
# call, llama.cpp from .peer-bin on the same llama-quantize file, then the new types' rows on the
# H200 (planner checks: Q8_0 8K, Q4_1 and Q5_K 8K and 8 x 2K); on an H100: the new types' rows.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call19
F=/tmp/l8b-Q4_K_M.gguf
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
prof() {  # name, limit, env..., -- profile_decode args
  local name=$1 lim=$2; shift 2; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
  timeout 100 env "${envs[@]}" python3 -m kvspill.bench.profile_decode "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-200)" | tee -a $L
}
H200=0; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && H200=1
if [ $H200 = 1 ]; then
  mkdir -p /tmp/lcpp-build && cat .peer-bin/lcpp-bin.txz.* | xz -d | tar x -C /tmp/lcpp-build
  (SHAPE=8b QUANT=Q4_K_M PEER=.peer-bin nice -n 10 bash .peer-bin/llamacpp_peer.sh model > /tmp/model.log 2>&1; echo "model done at $(( $(date +%s) - T0 )) s" >> /tmp/model.log) &
  prof k8 120 X=1 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192
  prof k32 140 X=1 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 32768
  prof fp8_8k 160 X=1 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
  prof bf16_8k 180 X=1 -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
  left 200 && { timeout 45 python3 -m kvspill.bench --shape llama-1b --vram-budget 16GiB --ctx 8192 --new-tokens 64 --out $OUT/w1_kvspill.jsonl > $OUT/w1.txt 2>&1; echo "w1 rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L; }
  while ! grep -q "model done" /tmp/model.log && left 230; do sleep 3; done
  tail -2 /tmp/model.log | tee -a $L
  if [ -f $F ]; then
    SHAPE=8b QUANT=Q4_K_M DEPTHS_GPU=8192,32768 NGEN=64 OUT=$OUT PEER=.peer-bin T_GPU=60 bash .peer-bin/llamacpp_peer.sh bench 2>&1 | tee -a $L
    SHAPE=8b QUANT=Q4_K_M NPL=1,8,32 NPP=2048 NGEN=128 OUT=$OUT PEER=.peer-bin T_BATCHED=60 bash .peer-bin/llamacpp_peer.sh batched 2>&1 | tee -a $L
    left 300 && { timeout 70 python3 -m kvspill.bench --model $F --vram-budget 16GiB --ctx 8192 32768 --new-tokens 64 --out $OUT/w4_kvspill.jsonl > $OUT/w4.txt 2>&1; echo "w4 rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L; }
    for c in 1 8 32; do prof file_c$c 360 X=1 -- --model $F --ctx 2048 --concurrency $c --steps 100 --kv-cache-memory 12GiB; done
  fi
else
  prof k8 150 X=1 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192
fi
prof q8_8k 440 X=1 -- --shape llama-8b:q8_0 --steps 100 --kv-cache-memory 16GiB --ctx 8192
prof q41_8k 460 X=1 -- --shape llama-8b:q4_1 --steps 100 --kv-cache-memory 16GiB --ctx 8192
prof q41_8x2k 480 X=1 -- --shape llama-8b:q4_1 --steps 100 --kv-cache-memory 16GiB --ctx 2048 --concurrency 8
prof q5k_8k 500 X=1 -- --shape llama-8b:q5_k --steps 100 --kv-cache-memory 16GiB --ctx 8192
prof q5k_8x2k 520 X=1 -- --shape llama-8b:q5_k --steps 100 --kv-cache-memory 16GiB --ctx 2048 --concurrency 8
(cd $OUT && tar czf all19.tgz *.txt && rm -f *.txt)
echo "call 19 done at $(( $(date +%s) - T0 )) s" | tee -a $L
