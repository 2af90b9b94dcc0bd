#!/usr/bin/env bash
# Any card (prepared 2026-12-07 09:32 UTC; carry .whl; about 300 s): call 5 found the consumers
# summing the producer's floats as they arrive (sum_early.diff) 4.6% faster on 8B fp8 with the
# handoff on (3.716 -> 3.547 ms), equal on Q4_K_M. Is fp8 with the handoff + sum_early faster than
# fp8's default (handoff off, prologue norms)? And the dense models (handoff on by default): does
# sum_early change them? Alternated twice, batch 1 at 8K.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh sum_early
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
D=bench/results/2026-12-07-fixed-kernels/scripts/sum_early.diff
F="--shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192"
B="--shape llama-8b --steps 100 --kv-cache-memory 16GiB --ctx 8192"
W="--shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192"
for r in a b; do
  prof f_default_$r 560 -- $F
  git apply $D
  prof f_early_h1_$r 560 KVSPILL_NORM_HANDOFF=1 -- $F
  prof b_early_$r 560 -- $B
  prof w_early_$r 560 -- $W
  git apply -R $D
  prof b_today_$r 500 -- $B
  prof w_today_$r 560 -- $W
done
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
