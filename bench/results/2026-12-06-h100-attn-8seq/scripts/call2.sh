#!/usr/bin/env bash
# Call 2: decode attention's stage 1 on 32-key tiles with three stages (XLAUNCH=32,4,3; call 2 of
# ../../2026-12-06-h100-words-one-dot gained 1.7% at 8 x 2K) at the other shapes: 32 x 2K (also
# 32,4,4), 16 x 2K, 1 x 8K (XMIN=1), and 8 x 2K with 32,4,4 / 32,2,3; alternated with the default.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call2
. bench/results/2026-12-06-h100-words-one-dot/scripts/prof_tree.sh
mkdir -p /tmp/ae && cp -r kvspill /tmp/ae/ && python3 bench/results/2026-12-06-h100-attn-8seq/scripts/attn_env_patch.py /tmp/ae | tee -a $L
which_tree ae PYTHONPATH=/tmp/site:/tmp/ae
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs
B=PYTHONPATH=/tmp/site:$PWD; P=PYTHONPATH=/tmp/site:/tmp/ae
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency"
K="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192"
for run in 1 2; do
  prof c32_base_$run 300 $B -- $A 32
  prof c32_b32st3_$run 300 $P XLAUNCH=32,4,3 -- $A 32
  prof c32_b32st4_$run 300 $P XLAUNCH=32,4,4 -- $A 32
  prof k8_base_$run 300 $B -- $K
  prof k8_b32st3_$run 300 $P XMIN=1 XLAUNCH=32,4,3 -- $K
done
prof c16_base 300 $B -- $A 16
prof c16_b32st3 300 $P XLAUNCH=32,4,3 -- $A 16
prof c8_b32st4 300 $P XLAUNCH=32,4,4 -- $A 8
prof c8_b32w2st3 300 $P XLAUNCH=32,2,3 -- $A 8
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 2 done at $(( $(date +%s) - T0 )) s" | tee -a $L
