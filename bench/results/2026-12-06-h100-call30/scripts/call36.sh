#!/usr/bin/env bash
# Call 36 (prepared 2026-12-06, not run yet): call 35 again with ncu's application replay (the
# program re-run once a pass, each kernel measured in its own run instead of replayed in place:
# call 35's kernel replay failed on q6k_int16x_kernel and _decode_split_kernel), one decode step
# bracketed by profile_decode --profiler-window, PDL off. k8: 1 x 8K (one-token GEMVs), c32:
# 32 x 2K (the tensor-core kernels), with L2 bytes beside DRAM bytes (is x's traffic the limit?).
# Then, if time is left, kernel replay with cache and clock control off (the other suspect).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call36
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
run_ncu() {  # NAME LIMIT_AT "NCU OPTIONS" -- profile_decode args
  local name=$1 lim=$2 opts=$3; shift 4
  [ $(( $(date +%s) - T0 )) -lt $lim ] || { echo "$name skipped (time)" | tee -a $L; return; }
  KVSPILL_PDL=0 timeout 200 ncu --profile-from-start off --graph-profiling node $opts --metrics $M --csv \
    --log-file $OUT/ncu_$name.csv python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m \
    --steps 20 --profiler-window 1 "$@" > $OUT/ncu_$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -c gpu__time_duration $OUT/ncu_$name.csv) kernels; $(grep -m1 ERROR $OUT/ncu_$name.csv)" | tee -a $L
}
run_ncu k8_app 100 "--replay-mode application" -- --kv-cache-memory 16GiB --ctx 8192
run_ncu c32_app 300 "--replay-mode application" -- --kv-cache-memory 12GiB --ctx 2048 --concurrency 32
run_ncu k8_nocc 480 "--cache-control none --clock-control none" -- --kv-cache-memory 16GiB --ctx 8192
