#!/usr/bin/env bash
# Session 13, call C: stream decode CUDA graphs: GPU tests; W3 128K fp8 and bf16 stream, graph vs eager, one machine.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline | head -1
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/runner/test_stream_graphs.py tests/runner/test_sparse_graphs.py tests/kv/test_cold_attention.py 2>&1 | tail -4 | tee $OUT/gpu_tests.txt
timeout 100 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A14 "calibration saved" $OUT/calibrate.txt | head -16
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --ctx 131072 --new-tokens 32 --cold-attention stream"
run() { date -u; timeout 130 python3 -m kvspill.bench "$@" --out $OUT/bench.jsonl 2>&1 | grep -iv warning | tail -2 | cut -c1-160; }
run $A --kv-cache-dtype fp8 --mode graph-fp8
KVSPILL_STREAM_CUDA_GRAPHS=0 run $A --kv-cache-dtype fp8 --mode eager-fp8
run $A --mode graph-bf16
KVSPILL_STREAM_CUDA_GRAPHS=0 run $A --mode eager-bf16
date -u
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/bench.jsonl"):
    d = json.loads(l)
    print(d["mode"], d["decode_tok_s"], "plan", d.get("plan_decode_tok_s"), "floor", d.get("floor_tok_s"), {k: v for k, v in d.items() if k.startswith("cold_s")})
PY
