#!/usr/bin/env bash
# Call 25 (prepared 2026-12-06 00:35 UTC): the landed lane-pass defaults without the switch
# (Q4_1 4 x 2K, Q5_K and Q8_0 2 x 2K), and Q4_K's TWO form (KVSPILL_LANE_PASSES=2: Q4_K_M's Q4_K
# weights on the integer-x lanes, a pass for both tokens) against its float lanes at 2 x 2K,
# alternated; then Q4_K's GPU test. A short machine: each run about 9 s once Triton has compiled.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call25
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
run() {  # name, LANE_PASSES value ("" = unset), shape, seqs
  left ${LIMIT:-80} || return
  timeout 40 env KVSPILL_LANE_PASSES=$2 python3 -m kvspill.bench.profile_decode --shape llama-8b:$3 --steps 100 --kv-cache-memory 16GiB --ctx 2048 --concurrency $4 > $OUT/$1.txt 2>&1
  echo "$1 rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$1.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
}
run q4km2_passes_a 2 q4_k_m 2
run q4km2_default_a "" q4_k_m 2
run q41_4_default "" q4_1 4
run q5k_2_default "" q5_k 2
run q80_2_default "" q8_0 2
run q4km2_passes_b 2 q4_k_m 2
run q4km2_default_b "" q4_k_m 2
left ${LIMIT:-80} && { timeout 30 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_gguf_int16x.py -k "lane_passes" > $OUT/pytest.txt 2>&1; echo "pytest rc $?: $(tail -1 $OUT/pytest.txt)" | tee -a $L; }
echo "call 25 done at $(( $(date +%s) - T0 )) s" | tee -a $L
