#!/usr/bin/env bash
# Session 11, call A: why W3 128K split barely beats stream. Per-path figures over the decode span.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; nproc; uptime
timeout 150 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A14 "calibration saved" $OUT/calibrate.txt || tail -5 $OUT/calibrate.txt
run() { date -u; timeout 130 python3 -m kvspill.bench --shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --ctx 131072 --new-tokens 32 "$@" --out $OUT/w3_128k.jsonl 2>&1 | grep -v Warning | tail -1 | cut -c1-200; }
run --cold-attention stream
run --cold-attention split
run --cold-attention split --cpu-attention-threads 12
run --cold-attention split --cpu-attention-threads 8
run --cold-attention cpu
date -u
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/w3_128k.jsonl"):
    d = json.loads(l)
    print(d["mode"], d["decode_tok_s"], d.get("plan_decode_tok_s"), {k: v for k, v in d.items() if k.startswith("cold_")})
PY
