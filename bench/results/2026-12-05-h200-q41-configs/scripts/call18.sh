#!/usr/bin/env bash
# Call 18 (2026-12-05): random 8B Q5_K at 4 x 2K with call 17's picks (q5k_picks.json, the 8-token
# entry's config) against without, and 8 x 2K as shipped: the planner's 3-4 token rate.
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call18
for r in a b; do
  for v in picks none; do
    cfg=; [ $v = picks ] && cfg=bench/results/2026-12-05-h200-q41-configs/scripts/q5k_picks.json
    timeout 60 env KVSPILL_MMA_CONFIGS=$cfg python3 -m kvspill.bench.profile_decode --shape llama-8b:q5_k --steps 100 --kv-cache-memory 16GiB --ctx 2048 --concurrency 4 > $OUT/q5k_4_${v}_$r.txt 2>&1
    echo "q5k 4 x 2K $v $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/q5k_4_${v}_$r.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
  done
done
timeout 60 python3 -m kvspill.bench.profile_decode --shape llama-8b:q5_k --steps 100 --kv-cache-memory 16GiB --ctx 2048 --concurrency 8 > $OUT/q5k_8.txt 2>&1
echo "q5k 8 x 2K shipped rc $?: $(grep -E 'engine.step|plan ' $OUT/q5k_8.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
(cd $OUT && tar czf all18.tgz *.txt && rm -f *.txt)
