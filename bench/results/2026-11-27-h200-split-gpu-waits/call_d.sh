#!/usr/bin/env bash
# Session 11, call D: the flag with >= waits (64-bit); GPU tests with a timeout each; W3 split and W1 again.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
for t in tests/kv/test_stream_flag.py tests/kv/test_cold_attention.py tests/kv/test_runner_tiers.py; do
  timeout 100 python3 -m pytest -q -p no:cacheprovider $t 2>&1 | tail -2 | tee -a $OUT/gpu_tests.txt; echo "rc $t ${PIPESTATUS[0]}" | tee -a $OUT/gpu_tests.txt
done
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py -k attention_cpu 2>&1 | tail -1 | tee -a $OUT/gpu_tests.txt
timeout 100 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A14 "calibration saved" $OUT/calibrate.txt | grep -E "stream|cpu_attn|host_read"
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --ctx 131072 --new-tokens 32"
run() { date -u; timeout 120 python3 -m kvspill.bench "$@" --out $OUT/bench.jsonl 2>&1 | grep -v Warning | tail -1 | cut -c1-100; }
run $A --cold-attention split
run --shape llama-1b --cap-gib 16 --cpu-kv-gib 6 --ctx 32768 131072 --new-tokens 32 --attention cpu --mode w1-attention-cpu
date -u
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/bench.jsonl"):
    d = json.loads(l)
    print(d["mode"], d["ctx"], d["decode_tok_s"], d.get("plan_decode_tok_s"), {k: v for k, v in d.items() if k.startswith("cold_c") or k.startswith("cold_s")})
PY
