#!/usr/bin/env bash
# Call 1 (prepared 2026-12-06 19:50 UTC, not run): norm_words_x.diff applied to the machine's copy,
# its GPU tests (bit-equal to rms_norm then words_x), then the kernel sweep (the RMSNorm and the
# x permutation in one launch against two or three). Any card; carry .whl. About 90 s.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call1
S1=bench/results/2026-12-06-norm-words-x/scripts
git apply $S1/norm_words_x.diff || { echo "norm_words_x.diff did not apply" | tee -a $L; exit 3; }
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_norm_words_x.py tests/kernels/test_fused_ops.py > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'passed|failed' $OUT/pytest.txt | tail -1)" | tee -a $L
timeout 150 python3 $S1/sweep_norm_words.py 2>&1 | tee $OUT/sweep.jsonl | tee -a $L
echo "call 1 done at $(( $(date +%s) - T0 )) s" | tee -a $L
