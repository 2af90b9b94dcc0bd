#!/usr/bin/env bash
# Call 22 (prepared 2026-12-05, not run): KVSPILL_LANE_PASSES (off by default, untimed): steps of
# 2..N tokens on Q5_K, Q4_1 or Q8_0 run their int16-x lanes (a
# launch per two tokens: the kernels' TWO form) instead of the tensor-core (Q4_1, Q5_K) or dot
# (Q8_0) kernel. GPU tests, then random 8B Q4_1 / Q5_K / Q8_0 at 2 and 3 x 2K with
# KVSPILL_LANE_PASSES=3 ("passes"; also one token a launch, "passes1",
# prof_lane_passes.py) against the default, alternated (ROUNDS="a b", LIMIT=560 s by default;
# a short machine: ROUNDS=a LIMIT=N). If the passes win at a count, they become
# the default there (env.lane_passes) and the planner's rates follow.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call22
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
timeout 90 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_gguf_int16x.py -k "lane_passes or q41 or q80" > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
for r in ${ROUNDS:-a b}; do
  for t in q4_1 q5_k q8_0; do
    for c in 2 3; do
      for v in passes passes1 default; do
        left ${LIMIT:-560} || break 4
        p=3; one=0; [ $v = default ] && p=; [ $v = passes1 ] && one=1
        timeout 50 env KVSPILL_LANE_PASSES=$p ONE_TOKEN_PASSES=$one python3 bench/results/2026-12-05-h200-q41-configs/scripts/prof_lane_passes.py --shape llama-8b:$t --steps 100 --kv-cache-memory 16GiB --ctx 2048 --concurrency $c > $OUT/${t}_${c}_${v}_$r.txt 2>&1
        echo "$t $c x 2K $v $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/${t}_${c}_${v}_$r.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
      done
    done
  done
done
(cd $OUT && tar czf all22.tgz *.txt && rm -f *.txt)
echo "call 22 done at $(( $(date +%s) - T0 )) s" | tee -a $L
