#!/usr/bin/env bash
# Call 39 (prepared 2026-12-06 07:00 UTC): call 38's H200 branch only (the split order A/B at 8 and
# 32 x 2K, then call 30's issue-54 rows with llama.cpp on the same file); on any other card it
# stops at once (the H100 rows of the tree are call 37-38's).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; exit 0; }
exec bash bench/results/2026-12-06-h100-split-order/scripts/call38.sh
