#!/usr/bin/env bash
# Call 41 (prepared 2026-12-06 07:10 UTC, the session's last device time): on an H200 only, call 30
# (issue 54's rows with llama.cpp on the same file, the tree's defaults); on any other card it stops.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; exit 0; }
exec bash bench/results/2026-12-06-h100-gated-down/scripts/call30.sh
