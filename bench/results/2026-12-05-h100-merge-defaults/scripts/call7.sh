#!/usr/bin/env bash
# Call 7 (not run yet: written 2026-12-05 with no device time left; best on the machine of call 4,
# whose Triton cache is warm): two one-token config sweeps never run, each then timed in the engine,
# alternated, where its pick beat the table by 2% alone:
# 1. the split-layout Q6_K lm_head (lm_head_sweep.py; the 8B Q4_K_M step's largest kernel, 157-165
#    us on an H200 = 2.7 TB/s, 63% of the copy ceiling): random 8B Q4_K_M at 8K (prof_lm_head.py);
# 2. Q4_1's four 8B shapes (q41_sweep.py; its table is Q5_K's picks): random 8B Q4_1 at 8K
#    (prof_q41.py);
# then W3 at 32K.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call7
S=bench/results/2026-12-05-h100-merge-defaults/scripts
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
ab() {  # name, wrapper, env var, picks file, limit, profile_decode args...
  local name=$1 wrap=$2 var=$3 picks=$4 lim=$5; shift 5
  for r in a b; do
    for v in pick table; do
      left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
      local p=; [ $v = pick ] && p=$picks
      timeout 90 env $var=$p python3 $S/$wrap "$@" > $OUT/${name}_${v}_$r.txt 2>&1
      echo "$name $v $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'config|engine.step|plan ' $OUT/${name}_${v}_$r.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $L
    done
  done
}
timeout 110 python3 $S/lm_head_sweep.py $OUT 2>&1 | tee -a $L
if [ -f $OUT/lm_head_pick.json ] && ! grep -q table $OUT/lm_head_pick.json; then
  ab lmh prof_lm_head.py LM_HEAD_PICK $OUT/lm_head_pick.json 260 --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192
fi
left 300 && timeout 120 python3 $S/q41_sweep.py $OUT 2>&1 | tee -a $L
if [ -f $OUT/q41_picks.json ] && grep -q "\[" $OUT/q41_picks.json; then
  ab q41 prof_q41.py Q41_PICKS $OUT/q41_picks.json 500 --shape llama-8b:q4_1 --steps 100 --kv-cache-memory 16GiB --ctx 8192
fi
left 520 && { timeout 75 python3 -m kvspill.bench --shape llama-8b --vram-budget 24GiB --cpu-kv-budget 40GiB --ctx 32768 --new-tokens 64 --out $OUT/w3.jsonl > $OUT/w3.txt 2>&1; echo "w3 rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L; }
(cd $OUT && tar czf all7.tgz *.txt && rm -f *.txt)
echo "call 7 done at $(( $(date +%s) - T0 )) s" | tee -a $L
