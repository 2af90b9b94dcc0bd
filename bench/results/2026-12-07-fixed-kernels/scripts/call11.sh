#!/usr/bin/env bash
# Not an H200 (prepared 2026-12-07 10:40 UTC; carry .whl; about 330 s). The tree has the handoff on
# for every format (3497c4b). 1) The GPU tests on the defaults (test_gpu's
# test_the_norm_handoff_is_every_formats_default has not run on a GPU yet). 2) Kernel tables, PDL
# off, random 8B Q4_K_M, the handoff off / on, tarred: what the handoff's GEMVs still add a launch
# after the tail loads (call 8: +0.5-0.9 us). 3) One guess: the int16-x consumers scale their
# [BLOCK_N, lanes] partial sums by rstd before the lane sum; rstd_after_sum.diff scales the row
# sums instead. Today / after the sum, random 8B Q4_K_M at 8K and 32K, alternated twice.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call11
FINAL=$OUT OUT=/tmp/raw_out && mkdir -p $OUT  # outputs tarred into $FINAL at the end: a cut call still brings its log
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py tests/model/test_random_q4km.py \
  $(ls tests/kernels/test_greedy_argmax.py 2>/dev/null) > $OUT/gpu_tests.txt 2>&1
echo "gpu tests (defaults) rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/gpu_tests.txt)" | tee -a $L
grep -E "^FAILED" $OUT/gpu_tests.txt | head -20 | tee -a $L
Q="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB"
A=200 . bench/results/2026-12-07-h200-rows/scripts/argmax_ab.sh  # since 12:30 UTC (about 90 s) before the rest
for h in 0 1; do prof q_tab_h$h 300 KVSPILL_PDL=0 KVSPILL_NORM_HANDOFF=$h -- $Q --ctx 8192 --kernels 10; done
D=bench/results/2026-12-07-fixed-kernels/scripts/rstd_after_sum.diff
for r in a b; do
  for form in today after; do
    [ $form = after ] && git apply $D
    prof q8k_${form}_$r 520 X=1 -- $Q --ctx 8192
    prof q32k_${form}_$r 560 X=1 -- $Q --ctx 32768
    [ $form = after ] && git apply -R $D
  done
done
(cd $OUT && tar czf $FINAL/call11.tgz .)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
