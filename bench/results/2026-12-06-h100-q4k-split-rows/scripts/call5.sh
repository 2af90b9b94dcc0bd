#!/usr/bin/env bash
# Call 5: the one-token int16-x GEMV with one 16-byte load of a lane's 4 quant words (load16) on
# gguf's rows, split rows and split rows in groups of 8, beside today's kernel on gguf's rows (the
# words form at 8-32 tokens as in call 3), alternated twice.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call5
R=bench/results/2026-12-06-h100-q4k-split-rows/scripts
for G in -1 0 8; do mkdir -p /tmp/pv$G && cp -r kvspill /tmp/pv$G/ && python3 $R/q4k_split_patch.py /tmp/pv$G $G load16 hdrptr | tee -a $L; done
for run in 1 2; do
  timeout 120 python3 $R/sweep_layouts.py gguf >> $OUT/layouts.jsonl 2>>$OUT/layouts.err
  PYTHONPATH=/tmp/site:/tmp/pv-1 timeout 120 python3 $R/sweep_layouts.py gguf+load16 >> $OUT/layouts.jsonl 2>>$OUT/layouts.err
  PYTHONPATH=/tmp/site:/tmp/pv0 timeout 120 python3 $R/sweep_layouts.py split+load16 >> $OUT/layouts.jsonl 2>>$OUT/layouts.err
  PYTHONPATH=/tmp/site:/tmp/pv8 timeout 120 python3 $R/sweep_layouts.py split8+load16 >> $OUT/layouts.jsonl 2>>$OUT/layouts.err
  echo "run $run at $(( $(date +%s) - T0 )) s" | tee -a $L
done
echo "call 5 done at $(( $(date +%s) - T0 )) s" | tee -a $L
