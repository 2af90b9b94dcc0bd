#!/usr/bin/env bash
# Call 9: today's Triton Q4_K kernels on gguf's rows against the same kernels on design d's
# interleaved layout (interleave_patch.py's copy of kvspill/), alternated twice.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call9
S=bench/results/2026-12-06-h100-q4k-cuda/scripts
mkdir -p /tmp/pi && cp -r kvspill /tmp/pi/ && python3 $S/interleave_patch.py /tmp/pi | tee -a $L
for run in 1 2; do
  timeout 120 python3 $S/sweep5.py gguf >> $OUT/sweep5.jsonl 2>>$OUT/sweep5.err
  PYTHONPATH=/tmp/site:/tmp/pi timeout 120 python3 $S/sweep5.py interleave >> $OUT/sweep5.jsonl 2>>$OUT/sweep5.err
done
echo "call 9 done at $(( $(date +%s) - T0 )) s" | tee -a $L
