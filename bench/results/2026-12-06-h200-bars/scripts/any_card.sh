#!/usr/bin/env bash
# Any card (prepared 2026-12-06 18:30 UTC): with device starts scarce, one script for whatever
# machine comes. An H200: call1.sh (issue 54's bars with llama.cpp; carry .whl and .peer-bin), or
# with SHORT=1 (less than 600 s of device time left) rows_only.sh (kvspill's rows, no llama.cpp).
# Another card ran ../../2026-12-06-mixed-qkv/scripts/call3.sh and call4.sh from here (18:43-19:09
# UTC; done); 2026-12-06 20:30 - 2026-12-07 02:42 UTC ../../2026-12-06-kv-head-major/scripts/call1.sh
# and ../../2026-12-06-norm-words-x/scripts/call1.sh (done on 2026-12-07).
set -u
# 2026-12-07 07:15-08:05 UTC an H200 was to run ../../2026-12-07-fixed-kernels/scripts/call3.sh (the
# handoff off / on on the bars' rows); none came, and an H100 decided the handoff (on for dense
# models, call 2 there). Since 08:10 UTC an H200 runs the bars again: call1.sh with 600 s of device
# time (llama.cpp built in the call), call3.sh with SHORT=1 (the rows on the defaults, about 200 s).
# Since 2026-12-07 12:15 UTC (under 950 s of device time left, every try since 11:18 a failed
# start): an H200 runs ../../2026-12-07-h200-rows/scripts/rows.sh (the rows without a peer, then
# the GPU tests; about 330 s); call1.sh (llama.cpp built in the call) waits for a fuller session.
# Since 2026-12-07 14:30 UTC (the argmax kernel landed, measured on an H100): an H200 runs
# ../../2026-12-07-widen-argmax/scripts/call_a.sh (carry .whl and .peer-bin; llama.cpp built and
# returned for call B, ../../2026-12-06-h100-gated-down/scripts/call30.sh, carrying the binaries).
# With SHORT=1 (under 900 s of device time left) rows_lean.sh there instead (the rows, no peer).
# Since 2026-12-07 16:30 UTC .peer-bin holds llama.cpp's binaries (../../2026-12-07-peer-build/,
# call 1; `bash bench/device_prep.sh slim` first, so .whl and .peer-bin fit the carry): an H200
# runs the bars' call on them (call30.sh, about 450 s).
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  [ "${SHORT:-0}" = 1 ] && exec bash bench/results/2026-12-07-widen-argmax/scripts/rows_lean.sh
  ls .peer-bin/lcpp-bin.txz.* > /dev/null 2>&1 && exec bash bench/results/2026-12-06-h100-gated-down/scripts/call30.sh
  exec bash bench/results/2026-12-07-widen-argmax/scripts/call_a.sh
fi
# Another card: call5.sh (08:30-09:26 UTC), call7.sh (09:42 UTC; done); since 10:40 UTC
# call11.sh (GPU tests on the handoff for every format, the handoff's kernel tables, the int16-x
# consumers' rstd after the lane sum; carry .whl; about 330 s).
# Since 14:30 UTC (call11.sh ran at 14:09 UTC, ../../2026-12-07-widen-argmax/ call 1):
# ../../2026-12-07-widen-argmax/scripts/call_rstd.sh (GPU tests with rstd_after_sum.diff, its A/B).
# Since 16:20 UTC (call_rstd.sh ran at 16:00, call 4 there; landed): without llama.cpp's binaries in
# .peer-bin, ../../2026-12-07-peer-build/scripts/build_tabs.sh (the build and kernel tables); with
# them, the bars' call on this card (../../2026-12-06-h100-gated-down/scripts/call30.sh).
echo "not an H200: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
# 16:55-17:15 UTC (call30.sh ran on an H100 at 16:19, call 2 there): with the binaries,
# ../../2026-12-07-peer-build/scripts/tabs.sh (kernel tables; ran at 16:31, call 3 there).
# Since 17:20 UTC: ../../2026-12-07-rows-regress/scripts/rows_ab.sh (the W3 / W5 rows before issue
# 54 and now, alternated; the old tree from the copy's git; about 550 s); since 18:55 UTC, first
# ../../2026-12-07-words-x-split/scripts/call1.sh (words_x split over programs, about 420 s; ran
# on an H100 at 2026-12-07 23:47 UTC, landed). Since 2026-12-08 00:30 UTC: rows_ab.sh (the W3 32K,
# W5 128K sparse and W3 128K split rows before issue 54 and now; about 550 s).
exec bash bench/results/2026-12-07-rows-regress/scripts/rows_ab.sh
