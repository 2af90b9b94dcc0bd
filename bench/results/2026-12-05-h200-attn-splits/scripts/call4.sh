#!/usr/bin/env bash
# Call 4: the landed split rule (default) against the old counts (fixed_splits.diff,
# KVSPILL_ATTN_SPLITS=3 / 5 / 9) at 32 / 16 / 8 x 2K, 3 stages at 32 x 2K, the 8K batch-1 row; alternated.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call4
N=bench/results/2026-12-05-h200-attn-splits/scripts
git apply $N/fixed_splits.diff && echo "fixed_splits.diff applied" | tee -a $L
B="--shape llama-8b:q4_k_m --steps 100"
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
run() {  # name, limit, env..., -- profile_decode args
  local name=$1 lim=$2; shift 2; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
  timeout 100 env "${envs[@]}" python3 -m kvspill.bench.profile_decode "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-200)" | tee -a $L
}
C32="$B --kv-cache-memory 16GiB --ctx 2048 --concurrency 32"
C16="$B --kv-cache-memory 16GiB --ctx 2048 --concurrency 16"
C8="$B --kv-cache-memory 12GiB --ctx 2048 --concurrency 8"
run c32_new_a 120 X=1 -- $C32
run c32_old 140 KVSPILL_ATTN_SPLITS=3 -- $C32
run c32_st3 160 KVSPILL_ATTN_STAGES=3 -- $C32
run c32_new_b 180 X=1 -- $C32
run c16_new 200 X=1 -- $C16
run c16_old 215 KVSPILL_ATTN_SPLITS=5 -- $C16
run c8_new 230 X=1 -- $C8
run c8_old 245 KVSPILL_ATTN_SPLITS=9 -- $C8
run 8k_b1 260 X=1 -- $B --kv-cache-memory 16GiB --ctx 8192
git checkout -q kvspill
(cd $OUT && tar czf all4.tgz *.txt && rm -f *.txt)
echo "call 4 done at $(( $(date +%s) - T0 )) s" | tee -a $L
