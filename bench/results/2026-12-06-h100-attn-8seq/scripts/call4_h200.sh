#!/usr/bin/env bash
# Call 4 on an H200 whose checkout has no built llama.cpp (prepared 2026-12-06 12:40 UTC, not run):
# llama.cpp built from .peer-bin's packed source beside the GPU rows (niced), then the f16 and
# Q4_K_M files; meanwhile issue 54's random-shape rows with today's defaults (8K, 1 / 8 x 2K twice,
# 8B fp8 / bf16, W1), 8 x 32K with the 32-key tiles against the old ones, the GPU tests of the
# new tiles. Its binaries come back as lcpp-bin.txz.*: copy them into .peer-bin/ and run
# ../../2026-12-06-h100-gated-down/scripts/call30.sh at once (the same warm machine keeps
# /tmp/l8b-Q4_K_M.gguf; a fresh one writes it again in about 70 s).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call4
. bench/results/2026-12-06-h100-words-one-dot/scripts/prof_tree.sh
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs  # $OUT keeps few files: all but the log tarred
( PEER_OUT=$OUTR nice -n 19 bash bench/device_prep.sh build-peer > /tmp/build.log 2>&1
  echo "build rc $? at $(( $(date +%s) - T0 )) s" >> /tmp/build.log
  SHAPE=8b QUANT=Q4_K_M PEER=.peer-bin nice -n 19 bash .peer-bin/llamacpp_peer.sh model >> /tmp/build.log 2>&1
  echo "model done at $(( $(date +%s) - T0 )) s" >> /tmp/build.log ) &
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency"
prof k8 100 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192
for run in 1 2; do prof c8_$run 150 -- $A 8; prof c1_$run 150 -- $A 1; done
prof fp8_8k 170 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
prof bf16_8k 180 -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
left 200 && { timeout 45 python3 -m kvspill.bench --shape llama-1b --vram-budget 16GiB --ctx 8192 --new-tokens 64 --out $OUT/w1_kvspill.jsonl > $OUT/w1.txt 2>&1; echo "w1 rc $? at $(( $(date +%s) - T0 )) s: $(grep -o '"decode_tok_s": [0-9.]*' $OUT/w1_kvspill.jsonl)" | tee -a $L; }
. bench/results/2026-12-06-h100-attn-8seq/scripts/ab_8x32k.sh
ab_8x32k 400
left 430 && { timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_attention.py tests/engine/test_gpu.py > $OUT/pytest4.txt 2>&1
  echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest4.txt)" | tee -a $L; }
while ! grep -q "model done" /tmp/build.log && left 570; do sleep 3; done
cp /tmp/build.log $OUT/; grep -E "rc|done|Error|error" /tmp/build.log | tail -5 | tee -a $L
ls -la $OUTR | tee -a $L
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 4 (H200) done at $(( $(date +%s) - T0 )) s" | tee -a $L
