#!/usr/bin/env bash
# Any card (prepared 2026-12-07 10:00 UTC; carry .whl; about 200 s). Call 8's tables (PDL off): the
# handoff's int16-x GEMVs 0.5-0.9 us slower a launch than without it, eating most of the norms'
# 2.2 us. One guess: a producer's tail loads the residual stream, stores h, then loads the next
# norm's weight (two trips to memory); tail_first.diff loads both at once. Today's kernels against
# it, alternated twice, PDL on: random 8B Q4_K_M with the handoff on, W1 and 8B fp8 on the defaults.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh tail_first
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
D=bench/results/2026-12-07-fixed-kernels/scripts/tail_first.diff
Q="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192"
W="--shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192"
F="--shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192"
for r in a b; do
  for form in today tail; do
    [ $form = tail ] && git apply $D
    prof q_${form}_$r 520 KVSPILL_NORM_HANDOFF=1 -- $Q
    prof w_${form}_$r 540 X=1 -- $W
    prof f_${form}_$r 560 X=1 -- $F
    [ $form = tail ] && git apply -R $D
  done
done
(cd $OUT && tar czf tail_first.tgz *.txt && rm -f *.txt)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
