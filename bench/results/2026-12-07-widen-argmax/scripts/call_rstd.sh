#!/usr/bin/env bash
# Not an H200 (prepared 2026-12-07 14:30 UTC; carry .whl; about 300 s): rstd_after_sum.diff
# (../../2026-12-07-fixed-kernels/scripts/, the int16-x consumers scale their row sums by the handed
# norm's rstd, not the [rows, lanes] partial sums; -0.1 to -0.5% in call 1 here) applied for the GPU
# tests, then against the tree, random 8B Q4_K_M 8K / 32K / 8 x 2K, alternated three times.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call_rstd
FINAL=$OUT OUT=/tmp/raw_out && mkdir -p $OUT  # raw outputs tarred into $FINAL at the end
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
D=bench/results/2026-12-07-fixed-kernels/scripts/rstd_after_sum.diff
git apply $D || exit 4
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py tests/model/test_random_q4km.py \
  > $OUT/gpu_tests.txt 2>&1
echo "gpu tests (rstd after the sum) rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/gpu_tests.txt)" | tee -a $L
grep -E "^FAILED" $OUT/gpu_tests.txt | head -20 | tee -a $L
git apply -R $D
Q="--shape llama-8b:q4_k_m --steps 100"
for r in a b c; do
  for form in today after; do
    [ $form = after ] && git apply $D
    prof q8k_${form}_$r 480 X=1 -- $Q --kv-cache-memory 16GiB --ctx 8192
    prof q32k_${form}_$r 500 X=1 -- $Q --kv-cache-memory 16GiB --ctx 32768
    prof c8_${form}_$r 520 X=1 -- $Q --kv-cache-memory 12GiB --ctx 2048 --concurrency 8
    [ $form = after ] && git apply -R $D
  done
done
(cd $OUT && tar czf $FINAL/call_rstd.tgz .)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
