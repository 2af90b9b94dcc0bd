#!/usr/bin/env bash
# Any card (prepared 2026-12-06 18:30 UTC): with device starts scarce, one script for whatever
# machine comes. An H200: call1.sh (issue 54's bars with llama.cpp; carry .whl and .peer-bin), or
# with SHORT=1 (less than 600 s of device time left) rows_only.sh (kvspill's rows, no llama.cpp).
# Another card ran ../../2026-12-06-mixed-qkv/scripts/call3.sh and call4.sh from here (18:43-19:09
# UTC; done); 2026-12-06 20:30 - 2026-12-07 02:42 UTC ../../2026-12-06-kv-head-major/scripts/call1.sh
# and ../../2026-12-06-norm-words-x/scripts/call1.sh (done on 2026-12-07).
set -u
# Since 2026-12-07 07:15 UTC an H200 runs ../../2026-12-07-fixed-kernels/scripts/call3.sh (the
# norm handoff off / on on the bars' rows without llama.cpp, about 560 s); call1.sh (the bars with
# llama.cpp, built in the call) waits until the handoff is decided.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash bench/results/2026-12-07-fixed-kernels/scripts/call3.sh
fi
# Another card (since 2026-12-07 08:05 UTC; 04:30-07:47 UTC call2.sh, done): the GPU tests and the
# handoff's rows on the defaults (../../2026-12-07-fixed-kernels/scripts/call4.sh; carry .whl).
echo "not an H200: $(nvidia-smi --query-gpu=name --format=csv,noheader); the GPU tests and the handoff's rows on the defaults instead"
exec bash bench/results/2026-12-07-fixed-kernels/scripts/call4.sh
