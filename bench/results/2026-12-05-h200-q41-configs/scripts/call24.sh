#!/usr/bin/env bash
# Call 24 (run 2026-12-05 23:59 UTC on an H100 as one command line): Q4_1 at 8 x 2K, the lane
# passes (KVSPILL_LANE_PASSES=8) against the default (the tensor cores), alternated twice.
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call24
for r in a b; do for c in 8; do for v in 8 0; do
  p=$v; [ $v = 0 ] && p=
  timeout 40 env KVSPILL_LANE_PASSES=$p python3 bench/results/2026-12-05-h200-q41-configs/scripts/prof_lane_passes.py --shape llama-8b:q4_1 --steps 100 --kv-cache-memory 16GiB --ctx 2048 --concurrency $c > $OUT/q41_${c}_p${v}_$r.txt 2>&1
  echo "q4_1 $c x 2K passes=$v $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/q41_${c}_p${v}_$r.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
done; done; done
(cd $OUT && tar czf all24.tgz *.txt && rm -f *.txt)
