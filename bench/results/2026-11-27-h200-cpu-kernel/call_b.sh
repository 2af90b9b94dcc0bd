#!/usr/bin/env bash
# Session 12, call B: two-size calibration of the CPU path; W3 stream/split/cpu and fp8 split at 128K, W1 attention cpu; plan beside each.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep "Model name"
timeout 120 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A16 "calibration saved" $OUT/calibrate.txt
(cd .devbench/cpuattn && for i in 1 2; do timeout 60 python3 harness.py new.cpp 16 262144 bf16 --read 2>&1 | tail -1; done) | tee $OUT/kernel.txt
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --ctx 131072 --new-tokens 32"
run() { date -u; timeout 150 python3 -m kvspill.bench "$@" --out $OUT/bench.jsonl 2>&1 | grep -v Warning | tail -1 | cut -c1-100; }
run $A --cold-attention split
run --shape llama-1b --cap-gib 16 --cpu-kv-gib 6 --ctx 32768 131072 --new-tokens 32 --attention cpu --mode w1-attention-cpu
run $A --cold-attention cpu
run $A --cold-attention stream
run $A --cold-attention split --kv-cache-dtype fp8 --mode w3-fp8-split
date -u
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/bench.jsonl"):
    d = json.loads(l)
    plan = d.get("plan_decode_tok_s")
    print(d["mode"], d["ctx"], d["decode_tok_s"], plan, round(plan / d["decode_tok_s"], 2) if plan else None, {k: v for k, v in d.items() if k.startswith("cold_c") or k.startswith("cold_s")})
PY
