#!/usr/bin/env bash
# Call 1, short (prepared 2026-12-06 21:55 UTC): call1.sh for a call with about 350 s of device
# time: no kernel sweep; 8 x 2K folded / separate twice, the GPU tests, 32 x 2K once each (the
# rows first: with less time than asked, they are what a short call brings back).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call1s
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
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 1 short done at $(( $(date +%s) - T0 )) s" | tee -a $L
