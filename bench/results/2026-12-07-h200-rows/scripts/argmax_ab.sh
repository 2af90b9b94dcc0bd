# Sourced after the prelude and prof.sh (T0, OUT, L, left, prof set), with A (the limit of this
# part's start, seconds since T0): the lm_head's output widened and its greedy argmax in one kernel
# (kernels/greedy_argmax.py, in the tree uncommitted) against the step before it (`.float()` and
# sampler's two-level torch argmax: widen_argmax.diff reversed), W1 8K and random 8B Q4_K_M 8K,
# batch 1, alternated twice.
D=bench/results/2026-12-07-h200-rows/scripts/widen_argmax.diff
# Only on a tree with widen_argmax_full.diff applied (uncommitted), which the A/B reverses in part.
if [ -f kvspill/kernels/greedy_argmax.py ] && git apply -R --check $D 2>/dev/null; then
for r in a b; do
  for form in kernel torch; do
    [ $form = torch ] && git apply -R $D
    prof w1_${form}_$r $A X=1 -- --shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192
    prof q8k_${form}_$r $(( A + 20 )) X=1 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192
    [ $form = torch ] && git apply $D
  done
done
else
  echo "argmax A/B skipped: widen_argmax_full.diff is not applied to this tree" | tee -a $L
fi
