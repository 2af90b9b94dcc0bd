#!/usr/bin/env bash
# Session 12, call C: W3 128K split with fp8 and bf16 KV, the CPU kernel on all 16 cores or 14 (the main thread launches the GPU's work); fp8 stream.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A16 "calibration saved" $OUT/calibrate.txt
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --ctx 131072 --new-tokens 32"
run() { date -u; timeout 150 python3 -m kvspill.bench "$@" --out $OUT/bench.jsonl 2>&1 | grep -v Warning | tail -1 | cut -c1-100; }
run $A --cold-attention split --kv-cache-dtype fp8 --mode w3-fp8-split
run $A --cold-attention split --kv-cache-dtype fp8 --mode w3-fp8-split --cpu-attention-threads 14
run $A --cold-attention stream --kv-cache-dtype fp8 --mode w3-fp8-stream
run $A --cold-attention split
run $A --cold-attention split --cpu-attention-threads 14
date -u
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/bench.jsonl"):
    d = json.loads(l)
    plan = d.get("plan_decode_tok_s")
    print(d["mode"], d["ctx"], d["decode_tok_s"], plan, round(plan / d["decode_tok_s"], 2) if plan else None, d.get("plan_placement"), {k: v for k, v in d.items() if k.startswith("cold_c") or k.startswith("cold_s")})
PY
