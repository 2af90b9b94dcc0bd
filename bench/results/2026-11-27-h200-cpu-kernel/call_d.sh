#!/usr/bin/env bash
# Session 12, call D (final code, one machine): GPU tests; calibrate; kernel vs host read; W3 stream/split/cpu, fp8 stream/split; W1 attention cpu.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
for t in tests/kv/test_cold_attention.py tests/kv/test_stream_flag.py tests/engine/test_cold_config.py; do
  timeout 100 python3 -m pytest -q -p no:cacheprovider $t 2>&1 | tail -1 | tee -a $OUT/gpu_tests.txt
done
timeout 120 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A16 "calibration saved" $OUT/calibrate.txt
(cd .devbench/cpuattn && for t in 16 14; do timeout 60 python3 harness.py new.cpp $t 262144 bf16 --read 2>&1 | tail -1; done) | tee $OUT/kernel.txt
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --ctx 131072 --new-tokens 32"
run() { date -u; timeout 150 python3 -m kvspill.bench "$@" --out $OUT/bench.jsonl 2>&1 | grep -v Warning | tail -1 | cut -c1-100; }
run $A --cold-attention split
run $A --cold-attention stream
run $A --cold-attention cpu
run $A --cold-attention split --kv-cache-dtype fp8 --mode w3-fp8-split
run $A --cold-attention stream --kv-cache-dtype fp8 --mode w3-fp8-stream
run --shape llama-1b --cap-gib 16 --cpu-kv-gib 6 --ctx 32768 131072 --new-tokens 32 --attention cpu --mode w1-attention-cpu
date -u
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/bench.jsonl"):
    d = json.loads(l)
    plan = d.get("plan_decode_tok_s")
    print(d["mode"], d["ctx"], d["decode_tok_s"], plan, round(plan / d["decode_tok_s"], 2) if plan else None, {k: v for k, v in d.items() if k.startswith("cold_c") or k.startswith("cold_s")})
PY
