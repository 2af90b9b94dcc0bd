#!/usr/bin/env bash
# Call 30 (prepared 2026-12-06 02:00 UTC): call 19 (../../2026-12-05-h200-q41-configs/scripts/call19.sh)
# reordered for a short H200 call: issue 54's rows with the defaults of 870eb5d (gated down
# projection, Q4_K lane passes, three attention stages from 32 sequences), kvspill's rows on the
# llama-quantize file first once it is written, then llama.cpp on the same file.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call30
F=/tmp/l8b-Q4_K_M.gguf
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
mkdir -p /tmp/lcpp-build && cat .peer-bin/lcpp-bin.txz.* | xz -d | tar x -C /tmp/lcpp-build
(SHAPE=8b QUANT=Q4_K_M PEER=.peer-bin nice -n 10 bash .peer-bin/llamacpp_peer.sh model > /tmp/model.log 2>&1; echo "model done at $(( $(date +%s) - T0 )) s" >> /tmp/model.log) &
prof k8 100 X=1 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192
prof c8 110 X=1 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency 8
prof fp8_8k 120 X=1 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
prof bf16_8k 130 X=1 -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
left 140 && { timeout 45 python3 -m kvspill.bench --shape llama-1b --vram-budget 16GiB --ctx 8192 --new-tokens 64 --out $OUT/w1_kvspill.jsonl > $OUT/w1.txt 2>&1; echo "w1 rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L; }
while ! grep -q "model done" /tmp/model.log && left 230; do sleep 3; done
tail -2 /tmp/model.log | tee -a $L
if [ -f $F ]; then
  for c in 1 8; do prof file_c$c 600 X=1 -- --model $F --ctx 2048 --concurrency $c --steps 100 --kv-cache-memory 12GiB; done
  prof file_c32 600 X=1 -- --model $F --ctx 2048 --concurrency 32 --steps 100 --kv-cache-memory 12GiB
  SHAPE=8b QUANT=Q4_K_M NPL=1,8,32 NPP=2048 NGEN=128 OUT=$OUT PEER=.peer-bin T_BATCHED=60 bash .peer-bin/llamacpp_peer.sh batched 2>&1 | tee -a $L
  timeout 70 python3 -m kvspill.bench --model $F --vram-budget 16GiB --ctx 8192 32768 --new-tokens 64 --out $OUT/w4_kvspill.jsonl > $OUT/w4.txt 2>&1; echo "w4 rc $? at $(( $(date +%s) - T0 )) s: $(grep -o '"decode_tok_s": [0-9.]*' $OUT/w4_kvspill.jsonl | tr '\n' ' ')" | tee -a $L
  SHAPE=8b QUANT=Q4_K_M DEPTHS_GPU=8192,32768 NGEN=64 OUT=$OUT PEER=.peer-bin T_GPU=60 bash .peer-bin/llamacpp_peer.sh bench 2>&1 | tee -a $L
  for c in 1 8; do prof file_c${c}_b 600 X=1 -- --model $F --ctx 2048 --concurrency $c --steps 100 --kv-cache-memory 12GiB; done  # the 8 / 1 ratio twice
fi
# Kernel tables with PDL off (each kernel's own time, no waits folded in), for the next steps at 8K
prof k8_tab_pdl0 560 KVSPILL_PDL=0 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192 --kernels 10
prof w1_tab_pdl0 575 KVSPILL_PDL=0 -- --shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192 --kernels 10
(cd $OUT && tar czf all30.tgz *.txt && rm -f *.txt)
echo "call 30 done at $(( $(date +%s) - T0 )) s" | tee -a $L
