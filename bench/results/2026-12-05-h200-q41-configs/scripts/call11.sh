#!/usr/bin/env bash
# Call 11 (call 10 cut to the device time left): the committed tree's Q5_K / Q4_K int16-x tests on the
# card, then random 8B Q5_K at 8K on the swept table, then Q4_1 at 8K.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call11
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
timeout 60 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_gguf_int16x.py -k "q5k or int16x_kernel_matches" > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
for row in q5_k q4_1; do
  left 100 || break
  timeout 80 python3 -m kvspill.bench.profile_decode --shape llama-8b:$row --steps 100 --kv-cache-memory 16GiB --ctx 8192 > $OUT/$row.txt 2>&1
  echo "$row 8k rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$row.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
done
echo "call 11 done at $(( $(date +%s) - T0 )) s" | tee -a $L
