#!/usr/bin/env bash
# An H200 (prepared 2026-12-07 07:15 UTC; carry .whl; about 560 s): the norm handoff
# (KVSPILL_NORM_HANDOFF) off / on, alternated, on issue 54's rows that need no peer, so that one call
# says both whether the handoff gains on the bars' card and where the bars stand with today's
# defaults: random 8B Q4_K_M 8K batch 1, 8B fp8 / bf16 8K, W1 8K (the bench's floor ratio),
# 1 x 2K; 8 / 32 x 2K once (the handoff is one-token steps only); 8K and W1 again; then the GPU
# tests of the fused forms with the handoff on. SHORT=1: the rows on the defaults, about 200 s.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh h200_handoff
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
R="--shape llama-8b:q4_k_m --steps 100"
w1() {  # w1 NAME LIMIT SWITCH
  left $2 || { echo "$1 skipped (time)" | tee -a $L; return; }
  KVSPILL_NORM_HANDOFF=$3 timeout 45 python3 -m kvspill.bench --shape llama-1b --vram-budget 16GiB --ctx 8192 \
    --new-tokens 64 --out $OUT/$1.jsonl > $OUT/$1.txt 2>&1
  echo "$1 rc $? at $(( $(date +%s) - T0 )) s: $(grep -oE '"(decode_tok_s|floor_ratio)": [0-9.]*' $OUT/$1.jsonl | tr '\n' ' ')" | tee -a $L
}
if [ "${SHORT:-0}" = 1 ]; then  # about 200 s of device time: the bars' rows on today's defaults
  prof k8 100 X=1 -- $R --kv-cache-memory 16GiB --ctx 8192
  prof c1 120 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 1
  prof c8 140 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 8
  prof fp8 160 X=1 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
  prof bf16 180 X=1 -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
  w1 w1 200 1
  prof c32 220 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 32
  exit 0
fi
for h in 0 1; do prof k8_h$h 120 KVSPILL_NORM_HANDOFF=$h -- $R --kv-cache-memory 16GiB --ctx 8192; done
for h in 0 1; do prof fp8_h$h 200 KVSPILL_NORM_HANDOFF=$h -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192; done
for h in 0 1; do prof bf16_h$h 260 KVSPILL_NORM_HANDOFF=$h -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192; done
for h in 0 1; do w1 w1_h$h 300 $h; done
for h in 0 1; do prof c1_h$h 340 KVSPILL_NORM_HANDOFF=$h -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 1; done
prof c8 370 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 8
prof c32 400 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 32
for h in 1 0; do prof k8_h${h}_b 440 KVSPILL_NORM_HANDOFF=$h -- $R --kv-cache-memory 16GiB --ctx 8192; done
for h in 1 0; do w1 w1_h${h}_b 470 $h; done
left 480 && { KVSPILL_NORM_HANDOFF=1 timeout 80 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py -k "fused or handoff" > $OUT/gpu_tests.txt 2>&1; echo "gpu tests (handoff on) rc $?: $(tail -1 $OUT/gpu_tests.txt)" | tee -a $L; }
(cd $OUT && tar czf h200_handoff.tgz *.txt && rm -f *.txt)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
