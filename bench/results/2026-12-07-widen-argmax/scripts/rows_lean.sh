#!/usr/bin/env bash
# An H200 with under 900 s of device time left (prepared 2026-12-07 14:35 UTC; carry .whl; about
# 250 s): issue 54's rows that need no peer, on today's defaults (the argmax kernel included),
# nothing else: random 8B Q4_K_M 8K / 32K batch 1, 1 / 8 / 32 x 2K, 8B fp8 / bf16 8K, W1 8K through
# the engine bench (its floor ratio), then 8K, 8 x 2K, fp8 and bf16 again. The GPU tests ran on an
# H100 (call 1 here); llama.cpp's H200 figures are those of 2026-12-05 19:32
# (../../2026-12-05-h200-q41-configs/).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200"; exit 3; }
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh rows_lean
FINAL=$OUT OUT=/tmp/raw_out && mkdir -p $OUT  # raw outputs tarred into $FINAL at the end
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
R="--shape llama-8b:q4_k_m --steps 100"
prof k8 300 X=1 -- $R --kv-cache-memory 16GiB --ctx 8192
prof c1 300 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 1
prof c8 300 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 8
prof fp8 300 X=1 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
prof bf16 300 X=1 -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
left 300 && { timeout 45 python3 -m kvspill.bench --shape llama-1b --vram-budget 16GiB --ctx 8192 \
  --new-tokens 64 --out $FINAL/w1.jsonl > $OUT/w1.txt 2>&1
  echo "w1 rc $? at $(( $(date +%s) - T0 )) s: $(grep -oE '"(decode_tok_s|floor_ratio)": [0-9.]*' $FINAL/w1.jsonl | tr '\n' ' ')" | tee -a $L; }
prof c32 320 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 32
prof k32 340 X=1 -- $R --kv-cache-memory 16GiB --ctx 32768
prof k8_b 360 X=1 -- $R --kv-cache-memory 16GiB --ctx 8192
prof c1_b 370 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 1
prof c8_b 380 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 8
prof fp8_b 390 X=1 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
prof bf16_b 400 X=1 -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
(cd $OUT && tar czf $FINAL/rows_lean.tgz .)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
