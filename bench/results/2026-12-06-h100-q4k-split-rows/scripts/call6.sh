#!/usr/bin/env bash
# Call 6: sweep_gemv.py (16 configs of the one-token int16-x GEMV) on gguf's rows (today's kernel),
# split rows (with and without the 16-byte quant load) and split rows in groups of 8 (with it).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call6
R=bench/results/2026-12-06-h100-q4k-split-rows/scripts
for G in 0 8; do mkdir -p /tmp/pv$G /tmp/ps$G && cp -r kvspill /tmp/pv$G/ && cp -r kvspill /tmp/ps$G/ && python3 $R/q4k_split_patch.py /tmp/pv$G $G load16 hdrptr && python3 $R/q4k_split_patch.py /tmp/ps$G $G hdrptr; done | tee -a $L
timeout 150 python3 $R/sweep_gemv.py gguf >> $OUT/gemv.jsonl 2>>$OUT/gemv.err
PYTHONPATH=/tmp/site:/tmp/pv0 timeout 150 python3 $R/sweep_gemv.py split0+load16 >> $OUT/gemv.jsonl 2>>$OUT/gemv.err
PYTHONPATH=/tmp/site:/tmp/ps0 timeout 150 python3 $R/sweep_gemv.py split0 >> $OUT/gemv.jsonl 2>>$OUT/gemv.err
PYTHONPATH=/tmp/site:/tmp/pv8 timeout 150 python3 $R/sweep_gemv.py split8+load16 >> $OUT/gemv.jsonl 2>>$OUT/gemv.err
echo "call 6 done at $(( $(date +%s) - T0 )) s" | tee -a $L
