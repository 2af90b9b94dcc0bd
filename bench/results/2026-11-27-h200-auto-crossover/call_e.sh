#!/usr/bin/env bash
# Session 14, call E (final code): W3 128K fp8 auto with the bench's new sized_plan_* figures.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A16 "calibration saved" $OUT/calibrate.txt | head -18
timeout 120 python3 -m kvspill.bench --shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32 --ctx 131072 --kv-cache-dtype fp8 --mode auto-fp8-128k --out $OUT/bench.jsonl 2>&1 | grep -iv warning | tail -1 | cut -c1-100
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/bench.jsonl"):
    d = json.loads(l)
    print({k: d.get(k) for k in ("mode", "decode_tok_s", "plan_decode_tok_s", "plan_vs_measured", "plan_placement", "sized_plan_decode_tok_s", "sized_plan_vs_measured", "sized_plan_placement", "hot_tokens", "cold_tokens", "cold_stream_graph_share")})
PY
date -u
