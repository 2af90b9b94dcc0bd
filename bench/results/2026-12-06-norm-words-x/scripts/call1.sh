#!/usr/bin/env bash
# Call 1 (prepared 2026-12-06, not run): norm_words_x.diff applied to the machine's copy; random 8B
# Q4_K_M 8 x 2K with the norms folded (the diff's default) against KVSPILL_NORM_WORDS=0, alternated
# twice; its GPU tests (the kernel bit-equal to rms_norm then words_x; random llama-1b:q4_k_m's
# greedy tokens with KVSPILL_NORM_WORDS on and off); 32 x 2K once each. The rows come first: a call
# with less time than asked brings them back. FULL=1 (a 600 s call of its own) adds the kernel sweep
# and 16 x 2K. Land it only where 8 x 2K gains and no row loses. Any card; carry .whl.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call1
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
S1=bench/results/2026-12-06-norm-words-x/scripts
git apply $S1/norm_words_x.diff || { echo "norm_words_x.diff did not apply" | tee -a $L; exit 3; }
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs
C="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency"
prof c8_fold 150 X=1 -- $C 8
prof c8_sep 200 KVSPILL_NORM_WORDS=0 -- $C 8
prof c8_fold2 230 X=1 -- $C 8
prof c8_sep2 260 KVSPILL_NORM_WORDS=0 -- $C 8
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_norm_words_x.py tests/engine/test_gpu.py -k "norm or words" > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'passed|failed' $OUT/pytest.txt | tail -1)" | tee -a $L
prof c32_fold 285 X=1 -- $C 32
prof c32_sep 310 KVSPILL_NORM_WORDS=0 -- $C 32
if [ "${FULL:-0}" = 1 ]; then
  timeout 90 python3 $S1/sweep_norm_words.py > $OUT/sweep.jsonl 2>&1; cat $OUT/sweep.jsonl | tee -a $L
  prof c16_fold 470 X=1 -- $C 16
  prof c16_sep 490 KVSPILL_NORM_WORDS=0 -- $C 16
fi
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 1 done at $(( $(date +%s) - T0 )) s" | tee -a $L
