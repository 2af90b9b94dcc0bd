#!/usr/bin/env bash
# Call 2: today's Q4_K kernels (int16-x GEMV at 1 token, words form at 8-32) on gguf's rows, on split
# rows (q4k_split_patch.py's copy) and on design d's 16-row tiles (interleave_patch.py's copy), the
# three alternated twice; on an H200, issue 54's rows first (call 30's script).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call2
R=bench/results/2026-12-06-h100-q4k-split-rows/scripts
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash bench/results/2026-12-06-h100-gated-down/scripts/call30.sh
fi
mkdir -p /tmp/ps /tmp/pi && cp -r kvspill /tmp/ps/ && cp -r kvspill /tmp/pi/
python3 $R/q4k_split_patch.py /tmp/ps 0 hdrptr | tee -a $L
python3 bench/results/2026-12-06-h100-q4k-cuda/scripts/interleave_patch.py /tmp/pi | tee -a $L
for run in 1 2; do
  timeout 120 python3 $R/sweep_layouts.py gguf >> $OUT/layouts.jsonl 2>>$OUT/layouts.err
  PYTHONPATH=/tmp/site:/tmp/ps timeout 120 python3 $R/sweep_layouts.py split >> $OUT/layouts.jsonl 2>>$OUT/layouts.err
  PYTHONPATH=/tmp/site:/tmp/pi timeout 120 python3 $R/sweep_layouts.py interleave >> $OUT/layouts.jsonl 2>>$OUT/layouts.err
  echo "run $run at $(( $(date +%s) - T0 )) s" | tee -a $L
done
echo "call 2 done at $(( $(date +%s) - T0 )) s" | tee -a $L
