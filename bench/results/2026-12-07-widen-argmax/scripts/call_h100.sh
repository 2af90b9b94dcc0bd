#!/usr/bin/env bash
# Not an H200 (prepared 2026-12-07 14:15 UTC; carry .whl; about 450 s): the argmax patch
# (../../2026-12-07-h200-rows/scripts/widen_argmax_full.diff, applied uncommitted) checked and timed
# where an H200 does not come: ../../2026-12-07-fixed-kernels/scripts/call11.sh (the GPU tests with
# the patch, the argmax A/B, the handoff's kernel tables, the rstd A/B), plus W1's kernel table with
# the patch (PDL off), beside call 8's table there without it.
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash bench/results/2026-12-07-widen-argmax/scripts/call_a.sh
fi
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call_h100
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
mkdir -p /tmp/w1tab && OUT=/tmp/w1tab prof w1_tab_argmax 60 KVSPILL_PDL=0 -- --shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192 --kernels 12
cp /tmp/w1tab/w1_tab_argmax.txt $OUT/
exec bash bench/results/2026-12-07-fixed-kernels/scripts/call11.sh
