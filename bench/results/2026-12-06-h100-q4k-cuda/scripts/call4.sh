#!/usr/bin/env bash
# Call 4: the GPU tests of this folder's kernel, then Nsight Compute on gate_up at 8 and 32 tokens,
# the CUDA kernel (m1w8s2, no split) beside the Triton words form (ncu_probe.py; kernel replay,
# no cache or clock control: calls 34-36 of ../2026-12-06-h100-call30/).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call4
timeout 120 python3 -m pytest -q -p no:cacheprovider bench/results/2026-12-06-h100-q4k-cuda/scripts/test_q4k_mma_cuda.py 2>&1 | tail -2 | tee -a $L
timeout 300 /usr/local/cuda/bin/ncu --kernel-name regex:q4k --launch-skip 0 --launch-count 8 --cache-control none \
  --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section LaunchStats --csv --page details python3 bench/results/2026-12-06-h100-q4k-cuda/scripts/ncu_probe.py > $OUT/ncu4.csv 2>$OUT/ncu4.err
echo "ncu rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L
gzip -k $OUT/ncu4.csv
