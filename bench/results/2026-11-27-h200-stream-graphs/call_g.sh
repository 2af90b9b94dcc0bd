#!/usr/bin/env bash
# Session 13, call G (final code): GPU tests; W3 128K fp8 stream graph vs eager; bf16 128K auto (split) and stream;
# bf16 64K auto; W5 sparse 128K.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_uva_gather.py tests/runner/test_stream_graphs.py tests/runner/test_sparse_graphs.py tests/kv/test_cold_attention.py 2>&1 | tail -3 | tee $OUT/gpu_tests.txt
timeout 100 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A14 "calibration saved" $OUT/calibrate.txt | head -16
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32"
run() { date -u; timeout 110 python3 -m kvspill.bench "$@" --out $OUT/bench.jsonl 2>&1 | grep -iv warning | tail -1 | cut -c1-100; }
run $A --ctx 131072 --cold-attention stream --kv-cache-dtype fp8 --mode graph-fp8-stream
KVSPILL_STREAM_CUDA_GRAPHS=0 run $A --ctx 131072 --cold-attention stream --kv-cache-dtype fp8 --mode eager-fp8-stream
run $A --ctx 65536 --mode graph-bf16-auto-64k
run --shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --sparse-budget-tokens 4096 --new-tokens 64 --cold-attention sparse --mode w5-sparse
run $A --ctx 131072 --mode auto-bf16
run $A --ctx 131072 --cold-attention stream --mode stream-bf16
date -u
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/bench.jsonl"):
    d = json.loads(l)
    print(d["mode"], d["ctx"], d["decode_tok_s"], "plan", d.get("plan_decode_tok_s"), d.get("plan_vs_measured"), "floor", d.get("floor_tok_s"), {k: v for k, v in d.items() if k.startswith("cold_s") or k.startswith("cold_c")})
PY
