#!/usr/bin/env bash
# Call B: the words form as landed on the GPU: the kernel tests; the words form now (rows clamped
# instead of masked loads, the Q4_K pairs as half tensors) against 0d44b15's (words_rows.py: the tree
# as it is, then with words_since_0d44b15.diff reversed, then as it is again); the pairs against the header path on
# the 8B's shapes (pairs_vs_header.py: which outputs differ, by how many ulps, each path's error
# against fp64, each run twice); Q6_K's precomputed scales (q6k_prescaled.diff); the Q4_K_M rows with
# and without the pairs; llama.cpp's build and the llama-quantize Q4_K_M file beside them (niced,
# for call C's same-file comparison, which also runs the 32 x 2K and 8K rows).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh callB
(nice -n 19 bash .peer/llamacpp_peer.sh build > /tmp/build.log 2>&1; echo "build done at $(( $(date +%s) - T0 )) s" >> /tmp/build.log) &
(SHAPE=8b nice -n 10 bash .peer/llamacpp_peer.sh model > /tmp/model.log 2>&1) &
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_mma.py -k "pairs or pack_scales or half_activations or two_byte or token_tiles or words_split_k" tests/model/test_random_q4km.py > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
for label in now before now_again; do
  [ $label = before ] && git apply -R $S/words_since_0d44b15.diff
  timeout 120 python3 $S/words_rows.py $label >> $OUT/words_rows.jsonl 2>&1
  echo "words_rows $label rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/words_rows.jsonl | cut -c1-400)" | tee -a $L
  [ $label = before ] && git apply $S/words_since_0d44b15.diff
done
timeout 120 python3 $S/pairs_vs_header.py > $OUT/pairs_vs_header.jsonl 2>&1
echo "pairs_vs_header rc $? at $(( $(date +%s) - T0 )) s: $(grep -c '"differ": 0' $OUT/pairs_vs_header.jsonl) of $(grep -c shape $OUT/pairs_vs_header.jsonl) bit-equal" | tee -a $L
git apply $S/q6k_prescaled.diff && timeout 90 python3 $S/q6k_scale_cost.py > $OUT/q6k_scale_cost.jsonl 2>&1
echo "q6k_scale_cost rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/q6k_scale_cost.jsonl | cut -c1-300)" | tee -a $L
git apply -R $S/q6k_prescaled.diff
P="python3 -m kvspill.bench.profile_decode"
run() {  # run NAME LIMIT ARGS...
  local name=$1 lim=$2; shift 2
  timeout $lim "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $L
}
Q="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048"
run q8x2k_pairs 120 $P $Q --concurrency 8  # the first run compiles the clamped-rows kernels
run q8x2k_off 50 env KVSPILL_SCALE_PAIRS=0 $P $Q --concurrency 8
run q1x2k 50 $P $Q
run q8x2k_pairs2 70 $P $Q --concurrency 8 --kernels 10  # the step's kernel table with the pairs
(cd $OUT && tar czf allB.tgz q*.txt && rm -f q*.txt)
wait
cat /tmp/build.log /tmp/model.log | tail -6 | tee -a $L
[ -f /tmp/lcpp-build/bin/llama-quantize ] && timeout $(( 590 - $(date +%s) + T0 )) bash -c "SHAPE=8b QUANT=Q4_K_M bash .peer/llamacpp_peer.sh model" 2>&1 | tail -3 | tee -a $L
echo "call B done at $(( $(date +%s) - T0 )) s" | tee -a $L
