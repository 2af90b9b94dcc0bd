#!/usr/bin/env bash
# Any card, about 300 s (prepared 2026-12-07 04:40 UTC): what a batch-1 step would gain if the
# RMSNorms, the SiLU or the attention merge cost nothing (ablate.py), random 8B Q4_K_M 8K and W1
# 8K, each variant beside the full step, alternated. Carry .whl.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh ablate
A=bench/results/2026-12-07-fixed-kernels/scripts/ablate.py
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
run() {  # run NAME LIMIT ABLATE ARGS...
  local name=$1 lim=$2 abl=$3; shift 3
  left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
  ABLATE=$abl timeout 90 python3 $A "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|graph GPU' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-160)" | tee -a $L
}
Q="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192"
W="--shape llama-1b --steps 200 --kv-cache-memory 8GiB --ctx 8192"
for r in a b; do
  run w1_base_$r 400 "" $W
  run w1_norm_$r 400 norm $W
  run w1_silu_$r 400 silu $W
  run w1_merge_$r 400 merge $W
  run w1_all_$r 400 norm,silu,merge $W
  run q_base_$r 480 "" $Q
  run q_norm_$r 480 norm $Q
  run q_silu_$r 480 silu $Q
  run q_merge_$r 480 merge $Q
  run q_all_$r 480 norm,silu,merge $Q
done
(cd $OUT && tar czf ablate.tgz *.txt && rm -f *.txt)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
