#!/usr/bin/env bash
# Session 26, call 2 (one call, one card): issue 12's GPU rows beside llama.cpp -nkvo, plan beside each.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KVSPILL_CALIBRATION=/tmp/kvspill-cal.json
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; hostname; uptime
ls -la /tmp/kvspill-cal.json /tmp/lcpp-build/bin/llama-bench /tmp/l1b.gguf 2>&1 | cut -c1-120
cp /tmp/kvspill-cal.json $OUT/calibration_used.json 2>/dev/null
(while true; do nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader >> $OUT/smi.txt; sleep 2; done) &
SMI=$!
run() { date -u; timeout $1 python3 -m kvspill.bench "${@:2}" --out $OUT/bench.jsonl 2>&1 | grep -v Warning | tail -1 | cut -c1-160; }
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --ctx 131072 --new-tokens 32"
run 80 --shape llama-1b --cap-gib 16 --cpu-kv-gib 6 --ctx 131072 --new-tokens 32 --attention cpu --mode w1-attention-cpu
date -u; PEER=.peer SHAPE=1b DEPTHS_NKVO=131072 NGEN=16 T_NKVO=150 bash .devbench/s26/llamacpp_peer.sh bench 2>&1 | tail -2
run 90 $A --cold-attention stream --mode w3-stream
run 90 $A --cold-attention split --mode w3-split
run 80 $A --cold-attention stream --kv-cache-dtype fp8 --mode w3-fp8-stream
run 130 --shape llama-8b --cap-gib 24 --cpu-kv-gib 60 --ctx 1048576 --chunk 16384 --new-tokens 8 --warmup-tokens 2 --kv-cache-dtype fp8 --fill-only-prefill --mode w3-1m-fp8-auto
kill $SMI; date -u
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/bench.jsonl"):
    d = json.loads(l)
    plan = d.get("plan_decode_tok_s")
    print(d["mode"], d["ctx"], d["decode_tok_s"], d.get("ttft_s"), plan, round(plan / d["decode_tok_s"], 2) if plan else None,
          {k: v for k, v in d.items() if k.startswith("cold_") or "floor" in k or "peak" in k})
PY
sort -t, -k2 -n $OUT/smi.txt | tail -1
