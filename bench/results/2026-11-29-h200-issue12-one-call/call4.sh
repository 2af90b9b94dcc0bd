#!/usr/bin/env bash
# Session 26, call 4: GPU tests of the skip list (mixed pools) and of the paths it touched, uniform pools included.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
t() { timeout $1 python3 -m pytest -q -p no:cacheprovider "${@:2}" > $OUT/t.txt 2>&1; echo "rc $? ${*:2}"; grep -E "^FAILED|passed|failed" $OUT/t.txt | tail -12; cat $OUT/t.txt >> $OUT/gpu_tests.txt; }
t 180 -k "cuda or graph" tests/engine/test_kv_skip_layers.py tests/runner/test_stream_graphs.py
date -u
t 130 tests/kv/test_cold_attention.py tests/kv/test_runner_tiers.py tests/kv/test_sparse_attention.py tests/kernels/test_sparse_kernels.py
date -u
t 110 tests/runner/test_sparse_graphs.py tests/engine/test_gpu.py -k "not quantized"
date -u
