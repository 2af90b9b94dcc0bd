#!/usr/bin/env bash
# Call 10: the swept Q4_1 and Q5_K tables as committed: GPU tests, random 8B Q5_K at 8K twice and
# 8 x 2K, Q4_1 and Q4_K_M at 8K; then, time left, a Q5_K_M file (llama-quantize) in both engines:
# llama-bench at 8K / 32K beside `kvspill.bench` on the same file.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call10
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
prof() {  # name, limit, profile_decode args
  local name=$1 lim=$2; shift 2
  left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
  timeout 120 python3 -m kvspill.bench.profile_decode "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-200)" | tee -a $L
}
H200=0; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && H200=1
mkdir -p /tmp/lcpp-build && cat .peer-bin/lcpp-bin.txz.* | xz -d | tar x -C /tmp/lcpp-build
(SHAPE=8b QUANT=Q5_K_M PEER=.peer-bin nice -n 10 bash .peer-bin/llamacpp_peer.sh model > /tmp/model.log 2>&1; echo "model done at $(( $(date +%s) - T0 )) s" >> /tmp/model.log) &
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_gguf_int16x.py -k "q5k or q41" > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
prof q5k_8k_a 200 --shape llama-8b:q5_k --steps 100 --kv-cache-memory 16GiB --ctx 8192
prof q5k_8k_b 200 --shape llama-8b:q5_k --steps 100 --kv-cache-memory 16GiB --ctx 8192
prof q5k_8x2k 220 --shape llama-8b:q5_k --steps 100 --kv-cache-memory 16GiB --ctx 2048 --concurrency 8
prof q41_8k 240 --shape llama-8b:q4_1 --steps 100 --kv-cache-memory 16GiB --ctx 8192
prof q4km_8k 260 --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192
while ! grep -q "model done" /tmp/model.log && left 280; do sleep 3; done
tail -2 /tmp/model.log | tee -a $L
F=/tmp/l8b-Q5_K_M.gguf
if [ -f $F ] && left 300; then
  SHAPE=8b QUANT=Q5_K_M DEPTHS_GPU=8192,32768 NGEN=64 OUT=$OUT PEER=.peer-bin T_GPU=60 bash .peer-bin/llamacpp_peer.sh bench 2>&1 | tee -a $L
  left 400 && { timeout 80 python3 -m kvspill.bench --model $F --vram-budget 16GiB --ctx 8192 32768 --new-tokens 64 --out $OUT/q5km_kvspill.jsonl > $OUT/q5km.txt 2>&1; echo "q5km rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L; }
fi
(cd $OUT && tar czf all10.tgz *.txt && rm -f *.txt)
echo "call 10 done at $(( $(date +%s) - T0 )) s" | tee -a $L
