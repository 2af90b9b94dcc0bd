#!/usr/bin/env bash
# Call 8 (not run yet: written 2026-12-05 with no device time left): the persistent row-tile loop
# of the one-token Q4_K GEMV (KVSPILL_GEMV_ROWS_LOOP, an experiment, off by default). Why: on the
# H200 the 8K batch-1 step is 1.12x the H100's for 1.43x the bandwidth, the one-tile kernel holds
# 242-244 registers (2 programs, 8 warps an SM, one tile's loads in flight each), and an sm_90
# compile (aot_rows.py) shows the loop's weight loads as cp.async into shared memory, 2-3 tiles in
# flight without registers, x rounded once a program. Kernel tests on the card, the kernels alone
# (rows_sweep.py), then random 8B Q4_K_M at 8K and 32K with the pick against the one-tile kernel,
# alternated.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call8
S=bench/results/2026-12-05-h100-merge-defaults/scripts
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_gguf_int16x.py -k "rows_loop or int16x_kernel_matches" > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
timeout 150 python3 $S/rows_sweep.py $OUT 2>&1 | tail -1 | tee -a $L
P=$(cat $OUT/rows_pick.txt 2>/dev/null || echo 0)
[ "$P" = 0 ] && P=2,3  # the engine A/B runs anyway: what the kernels alone miss (PDL overlap)
for r in a b; do
  for v in $P 0; do
    for c in 8192 32768; do
      left 560 || break
      timeout 90 env KVSPILL_GEMV_ROWS_LOOP=$v python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx $c > $OUT/k${c}_${v/,/-}_$r.txt 2>&1
      echo "ctx $c rows_loop $v $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step' $OUT/k${c}_${v/,/-}_$r.txt | tr -s ' ')" | tee -a $L
    done
  done
done
(cd $OUT && tar czf all8.tgz *.txt && rm -f *.txt)
echo "call 8 done at $(( $(date +%s) - T0 )) s" | tee -a $L
