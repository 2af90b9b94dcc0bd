#!/usr/bin/env bash
# Call 10 (prepared 2026-12-06 14:00 UTC, not run): the Q6_K words form's configs swept again now
# that it reads its scales in one load (5b5699c: fewer barriers and shared-memory trips, so the
# tile and split-K picks of 2026-12-03 may no longer be the best): `mma_sweep --types Q6_K
# --forms words`, ranked at 32 tokens, stage 2 at 8 / 16 / 32, then random 8B Q4_K_M at 8 / 16 /
# 32 x 2K with the sweep's picks (KVSPILL_MMA_CONFIGS; Q6_K entries only) against the table,
# alternated twice. Under Nsight Compute (2026-12-06, H100, call 36 of ../../2026-12-06-h100-call30/)
# the Q6_K down ran at 953 GB/s and the lm_head at 1.44 TB/s at 32 tokens, Q4_K's down at 1.21.
# Carry .whl. About 450 s.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call10
. bench/results/2026-12-06-h100-words-one-dot/scripts/prof_tree.sh
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs  # $OUT keeps few files: all but the log tarred
timeout 260 python3 -m kvspill.bench.mma_sweep --types Q6_K --forms words --stage1-tokens 32 --tokens 8 16 32 \
  --budget-s 230 --out $OUT/sweep 2>&1 | grep -v "^precompiled" | tail -10 | tee -a $L
cat $OUT/sweep/mma_configs.json 2>/dev/null | tee -a $L
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency"
if [ -s $OUT/sweep/mma_configs.json ]; then
  for run in 1 2; do
    for n in 32 8 16; do
      prof c${n}_table_$run 560 -- $A $n
      prof c${n}_picks_$run 560 KVSPILL_MMA_CONFIGS=$OUT/sweep/mma_configs.json -- $A $n
    done
  done
fi
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 10 done at $(( $(date +%s) - T0 )) s" | tee -a $L
