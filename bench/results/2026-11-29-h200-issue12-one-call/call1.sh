#!/usr/bin/env bash
# Session 26, call 1: build llama.cpp (llama-bench) and its W1 model; full calibration. Call 2 follows at once on the same machine.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KVSPILL_CALIBRATION=/tmp/kvspill-cal.json
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; nproc; free -g | head -2; hostname
(PEER=.peer bash .devbench/s26/llamacpp_peer.sh build > $OUT/llamacpp_build.log 2>&1; echo build rc $? >> $OUT/llamacpp_build.log) &
B=$!
timeout 150 python3 -m kvspill doctor --calibrate > $OUT/calibrate_during_build.txt 2>&1; echo calibrate-during-build rc $?
wait $B; tail -3 $OUT/llamacpp_build.log; date -u
PEER=.peer SHAPE=1b bash .devbench/s26/llamacpp_peer.sh model 2>&1 | tail -2; date -u
# the calibration the plan uses: on a quiet host (the one during the build shares the cores with the compiler)
timeout 150 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; echo calibrate rc $?
grep -A16 "calibration saved" $OUT/calibrate.txt | grep -E "stream|cpu_attn|host_read|pcie|h2d"; cp /tmp/kvspill-cal.json $OUT/ 2>/dev/null
date -u
