#!/usr/bin/env bash
# Call 7 (not run yet: written 2026-12-05 with no device time left; best on the machine of call 4):
# the split-layout lm_head's one-token configs swept (lm_head_sweep.py: the 8B Q4_K_M step's
# largest kernel, 157-165 us on an H200 = 2.7 TB/s, 63% of the copy ceiling; never swept in the
# split layout), then random 8B Q4_K_M at 8K batch 1 with the pick against the table, alternated
# (prof_lm_head.py), if the pick beat the table by 2% alone; W3 at 32K.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call7
S=bench/results/2026-12-05-h100-merge-defaults/scripts
timeout 110 python3 $S/lm_head_sweep.py $OUT 2>&1 | tee -a $L
K8="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192"
if [ -f $OUT/lm_head_pick.json ] && ! grep -q table $OUT/lm_head_pick.json; then
  for r in a b; do
    for v in pick table; do
      if [ $v = pick ]; then P=$OUT/lm_head_pick.json; else P=; fi
      timeout 90 env LM_HEAD_PICK=$P python3 $S/prof_lm_head.py $K8 > $OUT/lmh_${v}_$r.txt 2>&1
      echo "$v $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'lm_head config|engine.step|plan ' $OUT/lmh_${v}_$r.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
    done
  done
fi
timeout 150 python3 -m kvspill.bench --shape llama-8b --vram-budget 24GiB --cpu-kv-budget 40GiB --ctx 32768 --new-tokens 64 --out $OUT/w3.jsonl > $OUT/w3.txt 2>&1
echo "w3 rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L
(cd $OUT && tar czf all7.tgz *.txt && rm -f *.txt)
echo "call 7 done at $(( $(date +%s) - T0 )) s" | tee -a $L
