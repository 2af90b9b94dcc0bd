#!/usr/bin/env bash
# Call 12 (prepared 2026-12-05, not run: no device time left): the one-token dense / fp8 GEMV tiles
# re-swept per shape (dense_sweep.py: fp8 on the 8B projections, bf16 on the 8B's and the 1B's),
# then the picks in the engine against the shipped tiles, alternated: 8B fp8 and bf16 at 8K (the
# issue's fp8 >= 1.6x bf16) and W1 (llama-1b bf16) at 8K (its 0.7 of the floor).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call12
S=bench/results/2026-12-05-h200-q41-configs/scripts
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
timeout 230 python3 $S/dense_sweep.py $OUT 2>&1 | tee -a $L
grep -q ":" $OUT/dense_picks.json 2>/dev/null || { echo "no pick beat the table" | tee -a $L; }
for r in a b; do
  for v in pick table; do
    for row in "fp8 --shape llama-8b:fp8 --kv-cache-memory 8GiB" "bf16 --shape llama-8b --kv-cache-memory 8GiB" "w1 --shape llama-1b --kv-cache-memory 16GiB"; do
      set -- $row; name=$1; shift
      left 560 || break 3
      p=; [ $v = pick ] && p=$OUT/dense_picks.json
      timeout 60 env DENSE_PICKS=$p python3 $S/prof_dense_picks.py "$@" --steps 100 --ctx 8192 > $OUT/${name}_${v}_$r.txt 2>&1
      echo "$name $v $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/${name}_${v}_$r.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
    done
  done
done
(cd $OUT && tar czf all12.tgz *.txt && rm -f *.txt)
echo "call 12 done at $(( $(date +%s) - T0 )) s" | tee -a $L
