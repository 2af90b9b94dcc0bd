#!/usr/bin/env bash
# Any card, short (prepared 2026-12-06 21:20 UTC): for a call with less than 600 s of device time
# left. An H200: rows_only.sh (kvspill's rows, no llama.cpp). Another card:
# ../../2026-12-06-kv-head-major/scripts/call1.sh, then ../../2026-12-06-norm-words-x/scripts/call1_short.sh.
# Carry .whl.
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash bench/results/2026-12-06-h200-bars/scripts/rows_only.sh
fi
timeout 160 bash bench/results/2026-12-06-kv-head-major/scripts/call1.sh
exec bash bench/results/2026-12-06-norm-words-x/scripts/call1_short.sh
