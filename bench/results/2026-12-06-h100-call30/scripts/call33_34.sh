#!/usr/bin/env bash
# Calls 33 and 34 (2026-12-06 05:18 / 05:23 UTC, H100): Nsight Compute over a whole
# profile_decode run, before it had --profiler-window. Call 33 (FILTER unset) skipped 3,000
# launches and measured 600, all of the random model's set-up; call 34 (FILTER='regex:^_', the
# Triton kernels, 2,000-2,500 skipped) ran out of its 110 s in the prefill's kernels, then ncu
# failed on _decode_split_kernel. Kept as the record of what does not work; call 35 is the next try.
set -u; . bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call34
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed
for spec in "k8 8192 1 16GiB 2500" "c32 2048 32 12GiB 2000"; do
  set -- $spec
  KVSPILL_PDL=0 timeout 110 ncu --metrics $M ${FILTER:+--kernel-name $FILTER} --graph-profiling node \
    --launch-skip $5 --launch-count 520 --csv --log-file $OUT/ncu_$1.log python3 -m kvspill.bench.profile_decode \
    --shape llama-8b:q4_k_m --steps 30 --kv-cache-memory $4 --ctx $2 --concurrency $3 > $OUT/ncu_$1.txt 2>&1
  echo "$1 rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L
done
