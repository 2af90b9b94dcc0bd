#!/usr/bin/env bash
# Call 35 (2026-12-06): Nsight Compute on one decode step of the 8B Q4_K_M shape (random weights),
# only the step's kernels (profile_decode --profiler-window 1, ncu --profile-from-start off),
# PDL off so no kernel's time holds a wait on its predecessor. k8: 1 x 8K (one-token GEMVs);
# c32: 32 x 2K (the MMA kernels); k8_attn: 1 x 8K attention alone (it failed under ncu in call 34).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call35
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
run_ncu() {  # NAME LIMIT_AT KERNEL_REGEX -- profile_decode args
  local name=$1 lim=$2 rx=$3; shift 4
  [ $(( $(date +%s) - T0 )) -lt $lim ] || { echo "$name skipped (time)" | tee -a $L; return; }
  KVSPILL_PDL=0 timeout 90 ncu --profile-from-start off --graph-profiling node --kernel-name "regex:$rx" \
    --metrics $M --csv --log-file $OUT/ncu_$name.csv python3 -m kvspill.bench.profile_decode \
    --shape llama-8b:q4_k_m --steps 20 --profiler-window 1 "$@" > $OUT/ncu_$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -c gpu__time_duration $OUT/ncu_$name.csv) kernels" | tee -a $L
}
run_ncu k8 60 'q4k|q6k|rms|silu|merge|rope|words|gemv' -- --kv-cache-memory 16GiB --ctx 8192
run_ncu c32 120 'q4k|q6k|rms|silu|merge|rope|words|gemv' -- --kv-cache-memory 12GiB --ctx 2048 --concurrency 32
run_ncu k8_attn 170 'decode_split' -- --kv-cache-memory 16GiB --ctx 8192
