#!/usr/bin/env bash
# Session 11, call B: split with the CPU result going up non-blocking (pinned), and a host timeline.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD
date -u; nvidia-smi --query-gpu=name --format=csv,noheader; uptime
timeout 150 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A14 "calibration saved" $OUT/calibrate.txt | grep -E "stream|cpu_attn|host_read"
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --ctx 131072 --new-tokens 32"
run() { date -u; timeout 130 python3 -m kvspill.bench $A "$@" --out $OUT/w3_128k.jsonl 2>&1 | grep -v Warning | tail -1 | cut -c1-120; }
run --cold-attention stream
run --cold-attention split
date -u; timeout 130 python3 bench/results/2026-11-27-h200-split-gpu-waits/split_trace.py $A --cold-attention split --mode split-trace --out $OUT/w3_128k.jsonl 2>&1 | grep -v Warning | tail -1
date -u
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/w3_128k.jsonl"):
    d = json.loads(l)
    print(d["mode"], d["decode_tok_s"], d.get("plan_decode_tok_s"), {k: v for k, v in d.items() if k.startswith("cold_")})
PY
