#!/usr/bin/env bash
# Call 23 (run 2026-12-05 23:55 UTC on an H100 as one command line; the per-run file names here
# are fixed, the run's `${t}_${c}_p$v_$r` overwrote each other, its log has every line): the lane
# passes at 4 and 3 x 2K (KVSPILL_LANE_PASSES=4) against the default, alternated twice.
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call23
for r in a b; do for t in q4_1 q5_k q8_0; do for c in 4 3; do for v in 4 0; do
  p=$v; [ $v = 0 ] && p=
  timeout 40 env KVSPILL_LANE_PASSES=$p ONE_TOKEN_PASSES=0 python3 bench/results/2026-12-05-h200-q41-configs/scripts/prof_lane_passes.py --shape llama-8b:$t --steps 100 --kv-cache-memory 16GiB --ctx 2048 --concurrency $c > $OUT/${t}_${c}_p${v}_$r.txt 2>&1
  echo "$t $c x 2K passes=$v $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/${t}_${c}_p${v}_$r.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
done; done; done; done
