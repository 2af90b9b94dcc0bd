#!/usr/bin/env bash
# Call 2: llama.cpp's build and the llama-quantize Q4_K_M file in the background (niced); on the GPU
# the landed split rule (one wave: 2 / 4 / 8 splits at 32 / 16 / 8 x 2K) against the old counts
# (fixed_splits.diff: KVSPILL_ATTN_SPLITS=3 / 5 / 9) and 3 stages at 32 x 2K (KVSPILL_ATTN_STAGES=3),
# random llama-8b:q4_k_m, alternated; the GPU tests; then the file in llama.cpp and kvspill.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call2
N=bench/results/2026-12-05-h200-attn-splits/scripts; F=/tmp/l8b-Q4_K_M.gguf
(nice -n 19 bash .peer/llamacpp_peer.sh build > /tmp/build.log 2>&1; echo "build done at $(( $(date +%s) - T0 )) s" >> /tmp/build.log
 SHAPE=8b QUANT=Q4_K_M nice -n 10 bash .peer/llamacpp_peer.sh model >> /tmp/build.log 2>&1; echo "model done at $(( $(date +%s) - T0 )) s" >> /tmp/build.log) &
git apply $N/fixed_splits.diff && echo "fixed_splits.diff applied" | tee -a $L
B="--shape llama-8b:q4_k_m --steps 100"
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
run() {  # name, limit, env..., -- profile_decode args
  local name=$1 lim=$2; shift 2; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
  timeout 110 env "${envs[@]}" python3 -m kvspill.bench.profile_decode "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-200)" | tee -a $L
}
C32="$B --kv-cache-memory 16GiB --ctx 2048 --concurrency 32"
C16="$B --kv-cache-memory 16GiB --ctx 2048 --concurrency 16"
C8="$B --kv-cache-memory 12GiB --ctx 2048 --concurrency 8"
run c32_new_a 150 X=1 -- $C32
run c32_old 170 KVSPILL_ATTN_SPLITS=3 -- $C32
run c32_st3 190 KVSPILL_ATTN_STAGES=3 -- $C32
run c32_new_b 210 X=1 -- $C32
run c16_new 230 X=1 -- $C16
run c16_old 245 KVSPILL_ATTN_SPLITS=5 -- $C16
run c8_new 260 X=1 -- $C8
run c8_old 275 KVSPILL_ATTN_SPLITS=9 -- $C8
left 300 && { timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_decode_attention.py tests/model/test_random_q4km.py > $OUT/pytest.txt 2>&1; echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L; }
while ! grep -q "model done" /tmp/build.log && [ $(( $(date +%s) - T0 )) -lt 470 ]; do sleep 5; done
tail -3 /tmp/build.log | tee -a $L; ls -la $F 2>&1 | tee -a $L
if [ -f $F ] && grep -q "model done" /tmp/build.log; then
  SHAPE=8b QUANT=Q4_K_M DEPTHS_GPU=8192,32768 NGEN=64 OUT=$OUT PEER=.peer T_GPU=60 bash .peer/llamacpp_peer.sh bench 2>&1 | tee -a $L
  SHAPE=8b QUANT=Q4_K_M NPL=1,8,32 NPP=2048 NGEN=128 OUT=$OUT PEER=.peer T_BATCHED=60 bash .peer/llamacpp_peer.sh batched 2>&1 | tee -a $L
  echo "llama.cpp done at $(( $(date +%s) - T0 )) s" | tee -a $L
  timeout 60 python3 -m kvspill.bench --model $F --vram-budget 16GiB --ctx 8192 32768 --new-tokens 64 --out $OUT/w4_kvspill.jsonl > $OUT/w4.log 2>&1
  echo "w4 rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L; grep -E "tok/s|decode" $OUT/w4.log | tail -4 | cut -c1-300 | tee -a $L
  for c in 32 8 1; do
    left 580 || break
    timeout 30 python3 -m kvspill.bench.profile_decode --model $F --ctx 2048 --concurrency $c --steps 100 --kv-cache-memory 12GiB > $OUT/file_c$c.txt 2>&1
    echo "file c$c rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/file_c$c.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-220)" | tee -a $L
  done
fi
git checkout -q kvspill
(cd $OUT && tar czf all2.tgz *.txt *.log && rm -f *.txt w4.log)
echo "call 2 done at $(( $(date +%s) - T0 )) s" | tee -a $L
