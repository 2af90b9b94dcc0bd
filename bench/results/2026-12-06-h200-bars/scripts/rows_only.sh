#!/usr/bin/env bash
# Rows only (prepared 2026-12-06 21:20 UTC): for a call with less than call1.sh's 600 s of device
# time left. kvspill's rows of issue 54 on the random-weight shapes, no llama.cpp (its build alone
# is about 390 s): 8K / 32K batch 1, 1 / 8 / 32 x 2K, 8B fp8 / bf16 8K, W1 8K, then 8K and
# 1 / 8 x 2K again. Answers the bars that need no peer in the same call (420 tok/s at 8K, 8 x 2K
# at 5x one sequence, fp8 1.6x bf16, W1 0.7 of the floor). Any card; carry .whl. About 250 s.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh rows
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
R="--shape llama-8b:q4_k_m --steps 100"
prof k8 210 X=1 -- $R --kv-cache-memory 16GiB --ctx 8192
prof c1 230 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 1
prof c8 250 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 8
prof fp8_8k 270 X=1 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
prof bf16_8k 290 X=1 -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
left 310 && { timeout 45 python3 -m kvspill.bench --shape llama-1b --vram-budget 16GiB --ctx 8192 --new-tokens 64 --out $OUT/w1_kvspill.jsonl > $OUT/w1.txt 2>&1; echo "w1 rc $? at $(( $(date +%s) - T0 )) s: $(grep -oE '"(decode_tok_s|floor_ratio)": [0-9.]*' $OUT/w1_kvspill.jsonl | tr '\n' ' ')" | tee -a $L; }
prof k32 350 X=1 -- $R --kv-cache-memory 16GiB --ctx 32768
prof c32 370 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 32
prof k8_b 390 X=1 -- $R --kv-cache-memory 16GiB --ctx 8192
prof c1_b 410 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 1
prof c8_b 430 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 8
(cd $OUT && tar czf rows.tgz *.txt && rm -f *.txt)
echo "rows done at $(( $(date +%s) - T0 )) s" | tee -a $L
