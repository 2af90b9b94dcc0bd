#!/usr/bin/env bash
# Call A (prepared 2026-12-07 14:05 UTC; an H200 with a whole session's device time; carry .whl
# and .peer-bin): llama.cpp built from the packed source while the GPU tests run beside it (they
# check, they time nothing), its binaries packed into $OUT for call B
# (../../2026-12-06-h100-gated-down/scripts/call30.sh: the bars with llama.cpp); then, with
# nothing else on the CPUs, the argmax A/B (../../2026-12-07-h200-rows/scripts/argmax_ab.sh, the
# patch applied uncommitted) and the rows call 30 does not run (1 / 32 x 2K, 32K, fp8 / bf16).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; exit 3; }
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call_a
FINAL=$OUT OUT=/tmp/raw_out && mkdir -p $OUT  # raw outputs tarred into $FINAL at the end
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
(PEER_OUT=$FINAL bash bench/device_prep.sh build-peer > $OUT/build.log 2>&1; echo "build rc $? at $(( $(date +%s) - T0 )) s" >> $OUT/build.log) &
BUILD=$!
timeout 280 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_greedy_argmax.py tests/engine/test_gpu.py \
  tests/model/test_random_q4km.py > $OUT/gpu_tests.txt 2>&1
echo "gpu tests (patch applied) rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/gpu_tests.txt)" | tee -a $L
grep -E "^FAILED" $OUT/gpu_tests.txt | head -20 | tee -a $L
wait $BUILD; tail -2 $OUT/build.log | tee -a $L; ls -la $FINAL | tee -a $L
B=$(( $(date +%s) - T0 ))
A=$(( B + 150 )) . bench/results/2026-12-07-h200-rows/scripts/argmax_ab.sh
R="--shape llama-8b:q4_k_m --steps 100"
prof c1 $(( B + 190 )) X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 1
prof c32 $(( B + 210 )) X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 32
prof k32 $(( B + 230 )) X=1 -- $R --kv-cache-memory 16GiB --ctx 32768
prof fp8 $(( B + 250 )) X=1 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
prof bf16 $(( B + 270 )) X=1 -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
(cd $OUT && tar czf $FINAL/call_a.tgz .)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
