#!/usr/bin/env bash
# Call 3: today's Q4_K kernels on gguf's rows, split rows (all quants, then all headers) and split
# rows in groups of 8 super-blocks (q4k_split_patch.py G=8), alternated twice.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call3
R=bench/results/2026-12-06-h100-q4k-split-rows/scripts
for G in 0 8; do mkdir -p /tmp/ps$G && cp -r kvspill /tmp/ps$G/ && python3 $R/q4k_split_patch.py /tmp/ps$G $G hdrptr | tee -a $L; done
for run in 1 2; do
  timeout 120 python3 $R/sweep_layouts.py gguf >> $OUT/layouts.jsonl 2>>$OUT/layouts.err
  PYTHONPATH=/tmp/site:/tmp/ps0 timeout 120 python3 $R/sweep_layouts.py split >> $OUT/layouts.jsonl 2>>$OUT/layouts.err
  PYTHONPATH=/tmp/site:/tmp/ps8 timeout 120 python3 $R/sweep_layouts.py split8 >> $OUT/layouts.jsonl 2>>$OUT/layouts.err
  echo "run $run at $(( $(date +%s) - T0 )) s" | tee -a $L
done
echo "call 3 done at $(( $(date +%s) - T0 )) s" | tee -a $L
