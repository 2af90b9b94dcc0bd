#!/usr/bin/env bash
# Call C: ncu on the 8-token Q4_K gate_up kernel, as it is and without its scale loads.
set -u
[ -d /tmp/site/gguf ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
S=bench/results/2026-12-04-h200-mma-dequant-cost/scripts
for v in full noscale; do
  timeout 200 ncu --target-processes all -k regex:_q4k_mma_kernel --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section MemoryWorkloadAnalysis --section LaunchStats --section SourceCounters \
    python3 $S/one_call.py $v > $OUT/ncu_$v.txt 2>&1
  echo "ncu $v rc $?"; grep -iE "ERR|permission" $OUT/ncu_$v.txt | head -3
done
