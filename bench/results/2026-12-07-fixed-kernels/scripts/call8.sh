#!/usr/bin/env bash
# Any card (prepared 2026-12-07 09:50 UTC; carry .whl; about 150 s): call 5's kernel tables again
# (its files did not come back: too many under $OUT; this call tars them). Random 8B Q4_K_M and
# W1 at 8K, each kernel's CUDA time over 10 decode steps, PDL off, KVSPILL_NORM_HANDOFF 0 / 1.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh tables
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
Q="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192 --kernels 10"
W="--shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192 --kernels 10"
for h in 0 1; do prof q_tab_h$h 300 KVSPILL_PDL=0 KVSPILL_NORM_HANDOFF=$h -- $Q; done
for h in 0 1; do prof w_tab_h$h 400 KVSPILL_PDL=0 KVSPILL_NORM_HANDOFF=$h -- $W; done
(cd $OUT && tar czf tables.tgz *.txt && rm -f *.txt)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
