#!/usr/bin/env bash
# Call 20 (2026-12-05): Q4_1 and Q5_K at 2 tokens, which keep the dot kernel (their tensor-core
# entries start at 3): random 8B Q4_1 and Q5_K at 2 x 2K with their 4-token entries' configs at 2
# tokens too (two_token_entries.json) against without, alternated.
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call20
S=bench/results/2026-12-05-h200-q41-configs/scripts
for t in q4_1 q5_k; do
  for v in ${VARIANTS:-entry none entry2 none2}; do
    cfg=; [ ${v%2} = entry ] && cfg=$S/two_token_entries.json
    timeout 50 env KVSPILL_MMA_CONFIGS=$cfg python3 -m kvspill.bench.profile_decode --shape llama-8b:$t --steps 100 --kv-cache-memory 16GiB --ctx 2048 --concurrency 2 > $OUT/${t}_2_$v.txt 2>&1
    echo "$t 2 x 2K $v rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/${t}_2_$v.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
  done
done
(cd $OUT && tar czf all20.tgz *.txt && rm -f *.txt)
