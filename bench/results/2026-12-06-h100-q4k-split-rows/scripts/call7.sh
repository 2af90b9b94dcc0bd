#!/usr/bin/env bash
# Call 7: the one-token GEMV on gguf's rows and on split rows (+ the 16-byte load), compiled into a
# Triton cache each that comes back (the device's SASS, which the dev host's compile does not match).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call7
R=bench/results/2026-12-06-h100-q4k-split-rows/scripts
mkdir -p /tmp/pv0 /tmp/ps0 && cp -r kvspill /tmp/pv0/ && cp -r kvspill /tmp/ps0/ && python3 $R/q4k_split_patch.py /tmp/pv0 0 load16 hdrptr && python3 $R/q4k_split_patch.py /tmp/ps0 0 hdrptr
TRITON_CACHE_DIR=/tmp/tc_gguf timeout 100 python3 $R/one_token.py gguf | tee -a $L
PYTHONPATH=/tmp/site:/tmp/ps0 TRITON_CACHE_DIR=/tmp/tc_split timeout 100 python3 $R/one_token.py split | tee -a $L
PYTHONPATH=/tmp/site:/tmp/pv0 TRITON_CACHE_DIR=/tmp/tc_split16 timeout 100 python3 $R/one_token.py split+load16 | tee -a $L
python3 -c "import triton, os; print(triton.__version__, os.environ.get('TRITON_PTXAS_PATH'))" | tee -a $L
ls /tmp/tc_gguf/* | head -30 >> $L
cd /tmp && tar czf $OUT/tc.tgz tc_gguf tc_split tc_split16 && ls -la $OUT/tc.tgz | tee -a $L
