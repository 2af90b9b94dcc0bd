#!/usr/bin/env bash
# Call 10 (prepared 2026-12-06 10:00 UTC, not run): on an H200, issue 54's rows only (call 30's
# script, its ~560 s); on any other card the one-token int16-x GEMV with each K step's lines asked of L2 first
# (q4k_split_patch.py "prefetch") on gguf's rows and on split rows (G 0 / 8, the call-8 form),
# beside today's kernel: the table's configs (sweep_layouts.py at one token, alternated twice),
# then 8 configs each. Would the prefetch win back the split rows' one-token loss?
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call10
R=bench/results/2026-12-06-h100-q4k-split-rows/scripts
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash bench/results/2026-12-06-h100-gated-down/scripts/call30.sh
fi
for G in -1 0 8; do mkdir -p /tmp/pq$G && cp -r kvspill /tmp/pq$G/ && python3 $R/q4k_split_patch.py /tmp/pq$G $G load16 prefetch | tee -a $L; done
mkdir -p /tmp/pd0 && cp -r kvspill /tmp/pd0/ && python3 $R/q4k_split_patch.py /tmp/pd0 0 load16 | tee -a $L
for run in 1 2; do
  TOKENS=1 timeout 60 python3 $R/sweep_layouts.py gguf >> $OUT/one.jsonl 2>>$OUT/one.err
  TOKENS=1 PYTHONPATH=/tmp/site:/tmp/pq-1 timeout 60 python3 $R/sweep_layouts.py gguf+prefetch >> $OUT/one.jsonl 2>>$OUT/one.err
  TOKENS=1 PYTHONPATH=/tmp/site:/tmp/pd0 timeout 60 python3 $R/sweep_layouts.py split0+d >> $OUT/one.jsonl 2>>$OUT/one.err
  TOKENS=1 PYTHONPATH=/tmp/site:/tmp/pq0 timeout 60 python3 $R/sweep_layouts.py split0+prefetch >> $OUT/one.jsonl 2>>$OUT/one.err
  TOKENS=1 PYTHONPATH=/tmp/site:/tmp/pq8 timeout 60 python3 $R/sweep_layouts.py split8+prefetch >> $OUT/one.jsonl 2>>$OUT/one.err
  echo "run $run at $(( $(date +%s) - T0 )) s" | tee -a $L
done
export CONFIGS="4096,16,4 4096,8,4 2048,8,2 4096,8,2 4096,4,2 2048,16,4 2048,4,2 1024,8,2"
timeout 100 python3 $R/sweep_gemv.py gguf >> $OUT/gemv.jsonl 2>>$OUT/gemv.err
PYTHONPATH=/tmp/site:/tmp/pq-1 timeout 100 python3 $R/sweep_gemv.py gguf+prefetch >> $OUT/gemv.jsonl 2>>$OUT/gemv.err
PYTHONPATH=/tmp/site:/tmp/pq0 timeout 100 python3 $R/sweep_gemv.py split0+prefetch >> $OUT/gemv.jsonl 2>>$OUT/gemv.err
echo "call 10 done at $(( $(date +%s) - T0 )) s" | tee -a $L
