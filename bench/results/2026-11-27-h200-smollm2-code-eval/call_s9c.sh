#!/usr/bin/env bash
# Dev only: the sparse device-side assert with SmolLM2's geometry: which switch avoids it, and where (CUDA_LAUNCH_BLOCKING=1).
set -u
cp .smolA/smolpart_aa /tmp/ 2>/dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
date -u
for m in default eager nocache both; do
  CUDA_LAUNCH_BLOCKING=1 timeout 100 python3 .devbench/sparse_repro.py $m 3 2048 > /tmp/rep_$m.log 2>&1; echo "== $m rc=$?"
  grep -v "Assertion\|^frame\|^\[transformers\]" /tmp/rep_$m.log | tail -25 | cut -c1-300
done
date -u
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_sparse_kernels.py tests/kv/test_sparse_engine.py tests/runner/test_sparse_graphs.py tests/kv/test_sparse_attention.py 2>&1 | grep -E "passed|failed|FAILED" | tail -8
date -u
