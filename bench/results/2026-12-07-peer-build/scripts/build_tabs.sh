#!/usr/bin/env bash
# Not an H200 (prepared 2026-12-07 16:20 UTC; carry .whl and .peer-bin; about 350 s): llama.cpp built
# from the packed source (CUDA arch 90, as on an H200) and its binaries returned for the bars' call
# (../../2026-12-06-h100-gated-down/scripts/call30.sh carries them in .peer-bin); beside the build,
# kernel tables with PDL off (each kernel's own GPU time; the build loads only the CPUs) of random
# 8B Q4_K_M at 32 / 8 x 2K and 8K batch 1 on today's tree, for the batched step's next work.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh build_tabs
FINAL=$OUT OUT=/tmp/raw_out && mkdir -p $OUT  # raw outputs tarred into $FINAL at the end
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
(PEER_OUT=$FINAL bash bench/device_prep.sh build-peer > $OUT/build.log 2>&1; echo "build rc $? at $(( $(date +%s) - T0 )) s" >> $OUT/build.log) &
BUILD=$!
R="--shape llama-8b:q4_k_m --steps 100"
prof c32_tab_pdl0 400 KVSPILL_PDL=0 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 32 --kernels 14
prof c8_tab_pdl0 400 KVSPILL_PDL=0 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 8 --kernels 14
prof k8_tab_pdl0 400 KVSPILL_PDL=0 -- $R --kv-cache-memory 16GiB --ctx 8192 --kernels 14
wait $BUILD; tail -2 $OUT/build.log | tee -a $L; ls -la $FINAL | tee -a $L
(cd $OUT && tar czf $FINAL/build_tabs.tgz .)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
