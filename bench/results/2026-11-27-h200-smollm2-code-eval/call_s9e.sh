#!/usr/bin/env bash
# Dev only: the sparse graph step's device-side assert, with the graphed function run eagerly (CUDA_LAUNCH_BLOCKING=1).
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
date -u
CUDA_LAUNCH_BLOCKING=1 EAGER_GRAPH=1 timeout 120 python3 .devbench/sparse_repro.py default 1 2048 > $OUT/eager_graph.log 2>&1; echo "== eager_graph rc=$?"
CUDA_LAUNCH_BLOCKING=1 timeout 120 python3 .devbench/sparse_repro.py default 1 2048 > $OUT/graph.log 2>&1; echo "== graph rc=$?"
for f in $OUT/eager_graph.log $OUT/graph.log; do grep -v "Assertion\|^frame\|CUDAEvent.h" $f | grep -E "BAD|^replay|FAILED| ok |File|Error|line" | head -60 | cut -c1-250; done
date -u
