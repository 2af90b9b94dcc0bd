#!/usr/bin/env bash
# Call 8: split rows with the header addressed from the quants' pointer (q4k_split_patch.py's
# delta, 31 fewer registers) and the 16-byte quant load: today's kernels' layouts sweep (gguf's
# rows, split, split8; alternated twice), then the one-token GEMV's configs on each.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call8
R=bench/results/2026-12-06-h100-q4k-split-rows/scripts
for G in 0 8; do mkdir -p /tmp/pd$G && cp -r kvspill /tmp/pd$G/ && python3 $R/q4k_split_patch.py /tmp/pd$G $G load16 | tee -a $L; done
for run in 1 2; do
  timeout 100 python3 $R/sweep_layouts.py gguf >> $OUT/layouts.jsonl 2>>$OUT/layouts.err
  PYTHONPATH=/tmp/site:/tmp/pd0 timeout 100 python3 $R/sweep_layouts.py split0+d >> $OUT/layouts.jsonl 2>>$OUT/layouts.err
  PYTHONPATH=/tmp/site:/tmp/pd8 timeout 100 python3 $R/sweep_layouts.py split8+d >> $OUT/layouts.jsonl 2>>$OUT/layouts.err
  echo "run $run at $(( $(date +%s) - T0 )) s" | tee -a $L
done
timeout 100 python3 $R/sweep_gemv.py gguf >> $OUT/gemv.jsonl 2>>$OUT/gemv.err
PYTHONPATH=/tmp/site:/tmp/pd0 timeout 100 python3 $R/sweep_gemv.py split0+d >> $OUT/gemv.jsonl 2>>$OUT/gemv.err
PYTHONPATH=/tmp/site:/tmp/pd8 timeout 100 python3 $R/sweep_gemv.py split8+d >> $OUT/gemv.jsonl 2>>$OUT/gemv.err
echo "call 8 done at $(( $(date +%s) - T0 )) s" | tee -a $L
