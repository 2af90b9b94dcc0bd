#!/usr/bin/env bash
# Call 1 (prepared 2026-12-06 15:20 UTC): issue 54's bars on an H200 in one call from a checkout
# with no built llama.cpp: build it first at full speed (nothing else on the CPUs, so no row is
# timed beside the compile), then ../../2026-12-06-h100-gated-down/scripts/call30.sh (random-shape
# rows, the llama-quantize file's rows, llama-bench and llama-batched-bench on it). The built
# binaries come back as lcpp-bin.txz.* for a next call. Carry .whl and .peer-bin.
set -u
# An H100 instead: nothing (the session's H100 work ran in its own calls; since 2026-12-06 16:40
# a machine that is not an H200 costs only its start).
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; exit 3; }
T_START=$(date +%s)
mkdir -p $OUT/build
PEER_OUT=$OUT/build bash bench/device_prep.sh build-peer > /tmp/build.log 2>&1
echo "build rc $? at $(( $(date +%s) - T_START )) s" | tee -a /tmp/build.log
tail -3 /tmp/build.log > $OUT/build/build_tail.txt
exec bash bench/results/2026-12-06-h100-gated-down/scripts/call30.sh
