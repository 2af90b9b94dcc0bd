#!/usr/bin/env bash
# Call 9: Q4_1's swept table (committed beside this script) on the card: GPU tests, random 8B Q4_1 at
# 8K twice (the planner's rate); then two tables never swept: Q4_1's lm_head and Q5_K's five 8B
# shapes (type_sweep.py), each pick timed in the engine at 8K against the table, alternated.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call9
S=bench/results/2026-12-05-h200-q41-configs/scripts
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
ab() {  # name, type, picks, limit, profile_decode args...
  local name=$1 qtype=$2 picks=$3 lim=$4; shift 4
  for r in a b; do
    for v in pick table; do
      left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
      local p=; [ $v = pick ] && p=$picks
      timeout 90 env TYPE=$qtype PICKS=$p python3 $S/prof_type_picks.py "$@" > $OUT/${name}_${v}_$r.txt 2>&1
      echo "$name $v $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'configs|engine.step|plan ' $OUT/${name}_${v}_$r.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-400)" | tee -a $L
    done
  done
}
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_gguf_int16x.py -k q41 > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
for r in a b; do
  timeout 120 python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_1 --steps 100 --kv-cache-memory 16GiB --ctx 8192 > $OUT/q41_8k_$r.txt 2>&1
  echo "q41 8k $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/q41_8k_$r.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
done
timeout 40 python3 $S/type_sweep.py Q4_1 $OUT lm_head 2>&1 | tee -a $L
timeout 150 python3 $S/type_sweep.py Q5_K $OUT 2>&1 | tee -a $L
if [ -f $OUT/Q5_K_picks.json ] && grep -q "\[" $OUT/Q5_K_picks.json; then
  ab q5k Q5_K $OUT/Q5_K_picks.json 430 --shape llama-8b:q5_k --steps 100 --kv-cache-memory 16GiB --ctx 8192
fi
if [ -f $OUT/Q4_1_picks.json ] && grep -q "\[" $OUT/Q4_1_picks.json; then
  ab q41lmh Q4_1 $OUT/Q4_1_picks.json 520 --shape llama-8b:q4_1 --steps 100 --kv-cache-memory 16GiB --ctx 8192
fi
(cd $OUT && tar czf all9.tgz *.txt && rm -f *.txt)
echo "call 9 done at $(( $(date +%s) - T0 )) s" | tee -a $L
