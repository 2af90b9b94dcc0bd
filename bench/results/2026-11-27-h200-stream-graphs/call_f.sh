#!/usr/bin/env bash
# Session 13, call F (dev experiment): gather grid (old vs loop) alone and beside GEMVs; W3 128K fp8 graph:
# serial (committed) vs copies on a second stream, with the old and the loop gather.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 python3 .devbench/gather_bench.py 2>&1 | grep -v Warn | tee $OUT/gather_bench.jsonl
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32 --ctx 131072 --cold-attention stream --kv-cache-dtype fp8"
run() { date -u; timeout 110 python3 -m kvspill.bench "$@" --out $OUT/bench.jsonl 2>&1 | grep -iv warning | tail -1 | cut -c1-100; }
run $A --mode serial-old
KVSPILL_GATHER_PROGRAMS=64 KVSPILL_GATHER_CHUNK=16384 run $A --mode serial-loop64
cp .devbench/overlap/cold_stream_graph.py kvspill/kv/cold_stream_graph.py
sed -i 's/backend.stager().device_bufs\[0\]/backend.stager().device_bufs/' kvspill/runner/stream_graphs.py
run $A --mode overlap-old
KVSPILL_GATHER_PROGRAMS=64 KVSPILL_GATHER_CHUNK=16384 run $A --mode overlap-loop64
KVSPILL_GATHER_PROGRAMS=132 KVSPILL_GATHER_CHUNK=4096 run $A --mode overlap-loop132
date -u
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/bench.jsonl"):
    d = json.loads(l)
    print(d["mode"], d["decode_tok_s"], "plan", d.get("plan_decode_tok_s"), "floor", d.get("floor_tok_s"))
PY
