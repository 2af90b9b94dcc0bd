#!/usr/bin/env bash
# Call 5 (prepared 2026-12-06 19:30 UTC): call 3's guess, that under PDL the one launch's last
# programs (part B's, Q6_K v) are the tail the attention kernel's early launch lands on. b_first.diff
# (on mixed_mma.diff) puts part B's programs first in the grid (XB_FIRST=1). Random 8B Q4_K_M
# 8 x 2K, alternated: part A first, part B first, the two launches. Carry .whl. About 150 s.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call5
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
D=bench/results/2026-12-06-mixed-qkv/scripts
git apply --exclude="docs/*" --exclude="tests/kernels/*sm90_compile.py" $D/mixed_mma.diff && git apply $D/b_first.diff || { echo "diffs did not apply" | tee -a $L; exit 3; }
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs
C="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency 8"
prof a_first 90 XB_FIRST=0 -- $C
prof b_first 110 XB_FIRST=1 -- $C
prof two 125 KVSPILL_MIXED_MMA=0 -- $C
prof b_first2 140 XB_FIRST=1 -- $C
prof a_first2 155 XB_FIRST=0 -- $C
prof two2 170 KVSPILL_MIXED_MMA=0 -- $C
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 5 done at $(( $(date +%s) - T0 )) s" | tee -a $L
