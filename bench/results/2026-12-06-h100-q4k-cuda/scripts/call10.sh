#!/usr/bin/env bash
# Call 10: sweep6.py on gguf's rows and on the interleaved layout (the patched copy of call 9).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call10
S=bench/results/2026-12-06-h100-q4k-cuda/scripts
mkdir -p /tmp/pi && cp -r kvspill /tmp/pi/ && python3 $S/interleave_patch.py /tmp/pi | tee -a $L
timeout 200 python3 $S/sweep6.py gguf >> $OUT/sweep6.jsonl 2>>$OUT/sweep6.err
PYTHONPATH=/tmp/site:/tmp/pi timeout 200 python3 $S/sweep6.py interleave >> $OUT/sweep6.jsonl 2>>$OUT/sweep6.err
echo "call 10 done at $(( $(date +%s) - T0 )) s" | tee -a $L
