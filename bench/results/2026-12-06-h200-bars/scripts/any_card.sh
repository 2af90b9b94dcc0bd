#!/usr/bin/env bash
# Any card (prepared 2026-12-06 18:30 UTC): with device starts scarce, one script for whatever
# machine comes. An H200: call1.sh (issue 54's bars with llama.cpp; carry .whl and .peer-bin), or
# with SHORT=1 (less than 600 s of device time left) rows_only.sh (kvspill's rows, no llama.cpp).
# Another card ran ../../2026-12-06-mixed-qkv/scripts/call3.sh and call4.sh from here (18:43-19:09
# UTC; done); since 20:30 UTC it runs ../../2026-12-06-kv-head-major/scripts/call1.sh, then
# ../../2026-12-06-norm-words-x/scripts/call1.sh (carry .whl).
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  [ "${SHORT:-0}" = 1 ] && exec bash bench/results/2026-12-06-h200-bars/scripts/rows_only.sh
  exec bash bench/results/2026-12-06-h200-bars/scripts/call1.sh
fi
echo "not an H200: $(nvidia-smi --query-gpu=name --format=csv,noheader); the head-major attention and norm-words calls"
timeout 230 bash bench/results/2026-12-06-kv-head-major/scripts/call1.sh
exec bash bench/results/2026-12-06-norm-words-x/scripts/call1.sh
