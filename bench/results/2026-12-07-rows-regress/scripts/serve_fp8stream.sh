#!/usr/bin/env bash
# `kvspill bench serve` at concurrency 1 / 8 / 32 on the random 8B Q4_K_M shape, 16 GiB (2K
# prompts, 128 tokens out: ../../2026-12-04-h200-rope-in-decode/scripts/callI.sh as it ran there),
# then the W3 128K fp8 `stream` row before issue 54 (dad9dea) and now, alternated. Carry .whl;
# about 350 s.
set -u
. bench/results/2026-12-07-rows-regress/scripts/ab.sh serve_fp8stream
PYTHONPATH=/tmp/site:$PWD bash bench/results/2026-12-04-h200-rope-in-decode/scripts/callI.sh
A="--shape llama-8b --vram-budget 24GiB --cpu-kv-budget 40GiB --new-tokens 32 --ctx 131072 --cold-attention stream --kv-cache-dtype fp8"
run 100 . new-w3-fp8-stream $A
run 100 $OLD old-w3-fp8-stream $A
rows_done
echo "serve_fp8stream done at $(( $(date +%s) - T0 )) s" | tee -a $L
