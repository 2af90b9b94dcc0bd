#!/usr/bin/env bash
# Call 4 (prepared 2026-12-06 11:00 UTC, not run). On an H200: issue 54's rows with today's
# defaults, the 32-key tiles at 4-8 sequences included (call 30's script). Else: 8 x 32K with the
# new tiles against the old (long splits, not measured yet), the GPU tests of
# decode attention (the 4-sequence head_dim-128 case runs the new tiles) and the engine's; then
# 8 x 2K / 1 x 2K with the default (the ratio), twice. (The words form's one dot at 16 x 2K moved to
# ../../2026-12-06-h100-q6k-scale-loads/scripts/call5.sh.)
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  # a fresh checkout has no built llama.cpp (bench/device_prep.sh): build it beside the GPU rows first
  ls .peer-bin/lcpp-bin.txz.* > /dev/null 2>&1 || exec bash bench/results/2026-12-06-h100-attn-8seq/scripts/call4_h200.sh
  exec bash bench/results/2026-12-06-h100-gated-down/scripts/call30.sh
fi
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call4
W=bench/results/2026-12-06-h100-words-one-dot/scripts
. $W/prof_tree.sh
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs  # $OUT keeps few files: all but the log tarred
# First: 8 x 32K, the new tiles (default) against the old (64, 4, 2), alternated twice.
. bench/results/2026-12-06-h100-attn-8seq/scripts/ab_8x32k.sh
ab_8x32k 200
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_attention.py tests/engine/test_gpu.py > $OUT/pytest4.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest4.txt)" | tee -a $L
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency"
for run in 1 2; do
  prof c8_$run 540 PYTHONPATH=/tmp/site:$PWD -- $A 8
  prof c1_$run 540 PYTHONPATH=/tmp/site:$PWD -- $A 1
done
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 4 done at $(( $(date +%s) - T0 )) s" | tee -a $L
