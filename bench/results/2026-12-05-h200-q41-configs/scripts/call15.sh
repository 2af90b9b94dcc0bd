#!/usr/bin/env bash
# Call 15 (prepared 2026-12-05, not run): Q8_0's one-token int16-x lanes (KVSPILL_Q80_INT16X=1, off
# by default, untimed): GPU tests, the kernels alone against the generic kernel
# (`kvspill.bench.kernels_gguf --types Q8_0 --tokens 1`, each way), a config sweep
# (type_sweep.py Q8_0), then random 8B Q8_0 at 8K with the lanes (table and pick) against the
# generic kernel, alternated. If the lanes win, they become the default (env.q80_int16x_on) and
# the planner's q8_0 rate is refit.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call15
S=bench/results/2026-12-05-h200-q41-configs/scripts
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_gguf_int16x.py -k q80 > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
for v in 0 1; do
  timeout 90 env KVSPILL_Q80_INT16X=$v python3 -m kvspill.bench.kernels_gguf --types Q8_0 --tokens 1 2>&1 | tail -7 | sed "s/^/lanes=$v /" | tee -a $L
done
KVSPILL_Q80_INT16X=1 timeout 150 python3 $S/type_sweep.py Q8_0 $OUT 2>&1 | tee -a $L
for r in a b; do
  for v in pick table generic; do
    left 560 || break 2
    e="KVSPILL_Q80_INT16X=1"; p=; [ $v = pick ] && p=$OUT/Q8_0_picks.json; [ $v = generic ] && e="KVSPILL_Q80_INT16X=0"
    timeout 70 env $e TYPE=Q8_0 PICKS=$p python3 $S/prof_type_picks.py --shape llama-8b:q8_0 --steps 100 --kv-cache-memory 16GiB --ctx 8192 > $OUT/q8_${v}_$r.txt 2>&1
    echo "q8_0 8K $v $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'configs|engine.step|plan ' $OUT/q8_${v}_$r.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $L
  done
done
(cd $OUT && tar czf all15.tgz *.txt && rm -f *.txt)
echo "call 15 done at $(( $(date +%s) - T0 )) s" | tee -a $L
