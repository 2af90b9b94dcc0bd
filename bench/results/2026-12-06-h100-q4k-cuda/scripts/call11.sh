#!/usr/bin/env bash
# Call 11: sweep6.py's short K steps (SHORT) on the interleaved layout, then on gguf's rows.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call11
S=bench/results/2026-12-06-h100-q4k-cuda/scripts
mkdir -p /tmp/pi && cp -r kvspill /tmp/pi/ && python3 $S/interleave_patch.py /tmp/pi | tee -a $L
PYTHONPATH=/tmp/site:/tmp/pi timeout 150 python3 $S/sweep6.py interleave short >> $OUT/sweep6_short.jsonl 2>>$OUT/sweep6_short.err
timeout 150 python3 $S/sweep6.py gguf short >> $OUT/sweep6_short.jsonl 2>>$OUT/sweep6_short.err
echo "call 11 done at $(( $(date +%s) - T0 )) s" | tee -a $L
