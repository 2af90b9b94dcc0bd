#!/usr/bin/env bash
# Call 1: random 8B Q4_K_M at 8 x 2K with decode attention's splits and stage-1 launch config
# overridden (attn_env_patch.py, a copy at /tmp/ae): default (8 splits; 64 keys, 4 warps, 2 stages)
# against 4 / 6 / 16 splits, 3 stages, 32-key tiles with 3 stages, 8 warps; alternated twice.
# Then 1 x 2K (the ratio's denominator) twice. Logs are tarred: $OUT keeps few files.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call1
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
R=bench/results/2026-12-06-h100-attn-8seq/scripts
mkdir -p /tmp/ae && cp -r kvspill /tmp/ae/ && python3 $R/attn_env_patch.py /tmp/ae | tee -a $L
P=PYTHONPATH=/tmp/site:/tmp/ae
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency 8"
mkdir -p $OUT/runs; OUTR=$OUT; OUT=$OUTR/runs
for run in 1 2; do
  prof base_$run 500 PYTHONPATH=/tmp/site:$PWD -- $A
  prof s4_$run 500 $P XSPLITS=4 -- $A
  prof s6_$run 500 $P XSPLITS=6 -- $A
  prof s16_$run 500 $P XSPLITS=16 -- $A
  prof st3_$run 500 $P XLAUNCH=64,4,3 -- $A
  prof b32st3_$run 500 $P XLAUNCH=32,4,3 -- $A
  prof w8_$run 500 $P XLAUNCH=64,8,2 -- $A
  prof s4st3_$run 500 $P XSPLITS=4 XLAUNCH=64,4,3 -- $A
done
for run in 1 2; do prof one_$run 540 PYTHONPATH=/tmp/site:$PWD -- ${A% 8} 1; done
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 1 done at $(( $(date +%s) - T0 )) s" | tee -a $L
