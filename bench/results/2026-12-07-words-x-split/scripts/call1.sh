#!/usr/bin/env bash
# Call 1: `words_x` split over programs (words_x_split.diff, applied to the machine's copy)
# against one program a super-block (before_split.py), random 8B Q4_K_M at 8 and 32 x 2K,
# alternated twice; the kernel tables with PDL off; the words_x GPU tests and the greedy-token
# tests; the kernel sweep last. Any card; carry .whl; about 420 s (the rows first: a call cut
# short still brings them back).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call1
S1=bench/results/2026-12-07-words-x-split/scripts
git apply $S1/words_x_split.diff || { echo "words_x_split.diff did not apply" | tee -a $L; exit 3; }
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
prof() {  # NAME LIMIT ENTRY ARGS...: ENTRY "-m kvspill.bench.profile_decode" or the wrapper
  local name=$1 lim=$2 entry=$3; shift 3
  left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
  timeout 100 env ${ENVS:-X=1} python3 $entry "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-200)" | tee -a $L
}
NEW="-m kvspill.bench.profile_decode"; OLD=$S1/before_split.py
C="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency"
mkdir -p $OUT/runs; OUTR=$OUT; OUT=$OUTR/runs
prof c8_new 120 "$NEW" $C 8
prof c8_old 150 "$OLD" $C 8
prof c32_new 180 "$NEW" $C 32
prof c32_old 210 "$OLD" $C 32
prof c8_old2 240 "$OLD" $C 8
prof c8_new2 270 "$NEW" $C 8
prof c32_old2 300 "$OLD" $C 32
prof c32_new2 330 "$NEW" $C 32
ENVS=KVSPILL_PDL=0 prof c32_tab_pdl0 360 "$NEW" $C 32 --steps 50 --kernels 14
ENVS=KVSPILL_PDL=0 prof c8_tab_pdl0 390 "$NEW" $C 8 --steps 50 --kernels 14
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_mma.py tests/engine/test_gpu.py tests/model/test_random_q4km.py \
  -k "words or gated or quantized or random" > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'passed|failed' $OUT/pytest.txt | tail -1)" | tee -a $L
left 470 && { timeout 90 python3 $S1/sweep_words_x.py > $OUT/sweep.jsonl 2>&1; cat $OUT/sweep.jsonl | cut -c1-300 | tee -a $L; }
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 1 done at $(( $(date +%s) - T0 )) s" | tee -a $L
