#!/usr/bin/env bash
# Call 13 (prepared 2026-12-05, not run): Q8_0's one-token config re-swept (q8_sweep.py: the generic
# kernel's one config for every shape, picked on an H100 on 2026-11-26), the pick against it in the
# engine, random 8B Q8_0 at 8K, alternated; then call 10's rows (Q5_K's swept table on this card).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call13
S=bench/results/2026-12-05-h200-q41-configs/scripts
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
timeout 160 python3 $S/q8_sweep.py $OUT 2>&1 | tee -a $L
if grep -q "\[" $OUT/q8_pick.json 2>/dev/null; then
  for r in a b; do
    for v in pick table; do
      left 330 || break 2
      p=; [ $v = pick ] && p=$OUT/q8_pick.json
      timeout 70 env Q8_PICK=$p python3 $S/prof_q8_pick.py --shape llama-8b:q8_0 --steps 100 --kv-cache-memory 16GiB --ctx 8192 > $OUT/q8_${v}_$r.txt 2>&1
      echo "q8 $v $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'config|engine.step|plan ' $OUT/q8_${v}_$r.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
    done
  done
fi
for row in "q5k_8k --shape llama-8b:q5_k --ctx 8192" "q5k_8x2k --shape llama-8b:q5_k --ctx 2048 --concurrency 8" "q41_8k --shape llama-8b:q4_1 --ctx 8192"; do
  set -- $row; name=$1; shift
  left 520 || break
  timeout 70 python3 -m kvspill.bench.profile_decode "$@" --steps 100 --kv-cache-memory 16GiB > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
done
(cd $OUT && tar czf all13.tgz *.txt && rm -f *.txt)
echo "call 13 done at $(( $(date +%s) - T0 )) s" | tee -a $L
