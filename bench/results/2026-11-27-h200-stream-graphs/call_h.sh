#!/usr/bin/env bash
# Session 13, call H: W3 128K bf16 split, the final code's looping gather vs the old one-program-per-piece gather, one machine.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32 --ctx 131072 --cold-attention split"
run() { date -u; timeout 110 python3 -m kvspill.bench "$@" --out $OUT/bench.jsonl 2>&1 | grep -iv warning | tail -1 | cut -c1-100; }
run $A --mode split-loop-gather
cp .devbench/oldgather/uva_gather.py kvspill/kernels/uva_gather.py
run $A --mode split-old-gather
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/bench.jsonl"):
    d = json.loads(l)
    print(d["mode"], d["decode_tok_s"], {k: v for k, v in d.items() if k.startswith("cold_s") or k.startswith("cold_c")})
PY
