#!/usr/bin/env bash
# Call 10: the swept Q4_1 and Q5_K tables as committed: GPU tests, random 8B Q5_K at 8K twice and
# 8 x 2K, Q4_1 and Q4_K_M at 8K (a Q5_K_M file against llama.cpp was dropped: device time).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call10
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
prof() {  # name, limit, profile_decode args
  local name=$1 lim=$2; shift 2
  left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
  timeout 90 python3 -m kvspill.bench.profile_decode "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-200)" | tee -a $L
}
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_gguf_int16x.py -k "q5k or q41 or int16x_kernel_matches" > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
prof q5k_8k_a 130 --shape llama-8b:q5_k --steps 100 --kv-cache-memory 16GiB --ctx 8192
prof q5k_8k_b 150 --shape llama-8b:q5_k --steps 100 --kv-cache-memory 16GiB --ctx 8192
prof q5k_8x2k 170 --shape llama-8b:q5_k --steps 100 --kv-cache-memory 16GiB --ctx 2048 --concurrency 8
prof q41_8k 190 --shape llama-8b:q4_1 --steps 100 --kv-cache-memory 16GiB --ctx 8192
prof q4km_8k 210 --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192
(cd $OUT && tar czf all10.tgz *.txt && rm -f *.txt)
echo "call 10 done at $(( $(date +%s) - T0 )) s" | tee -a $L
