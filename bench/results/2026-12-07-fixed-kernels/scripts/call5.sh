#!/usr/bin/env bash
# Any card (prepared 2026-12-07 08:30 UTC; carry .whl; about 300 s): why the handoff is only equal
# on GGUF weights (random 8B Q4_K_M 8K: 2.727 against 2.726 ms, call 2) where the norms' ceiling is
# 4.6%: each kernel's CUDA time over 10 decode steps with PDL off (so that no kernel's time holds
# its wait for the one before), KVSPILL_NORM_HANDOFF 0 / 1; then the dense W1 the same way, where
# it gains (1.4%). Compare the int16-x GEMVs of o, down, gate_up and the mixed qkv between the two.
# Then one guess tried: the consumers hold SUMS_PAD floats (up to 8 a thread) through their K loop;
# scripts/sum_early.diff sums them as they arrive (one float held). Handoff on, random 8B Q4_K_M
# and 8B fp8 at 8K, today's consumers against sum_early.diff's, alternated twice.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh tables
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
Q="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192 --kernels 10"
W="--shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192 --kernels 10"
for h in 0 1; do prof q_tab_h$h 200 KVSPILL_PDL=0 KVSPILL_NORM_HANDOFF=$h -- $Q; done
for h in 0 1; do prof w_tab_h$h 260 KVSPILL_PDL=0 KVSPILL_NORM_HANDOFF=$h -- $W; done
for h in 0 1; do prof q_h${h}_pdl 290 KVSPILL_NORM_HANDOFF=$h -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192; done
D=bench/results/2026-12-07-fixed-kernels/scripts/sum_early.diff
for r in a b; do
  for form in today early; do
    [ $form = early ] && git apply $D
    prof q_${form}_$r 520 KVSPILL_NORM_HANDOFF=1 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192
    prof f_${form}_$r 540 KVSPILL_NORM_HANDOFF=1 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
    [ $form = early ] && git apply -R $D
  done
done
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
