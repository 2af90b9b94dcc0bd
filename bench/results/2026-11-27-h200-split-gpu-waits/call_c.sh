#!/usr/bin/env bash
# Session 11, call C: the GPU waits for the CPU result on a flag (kv/stream_flag.py); W3 split, W1 attention cpu.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD
date -u; nvidia-smi --query-gpu=name --format=csv,noheader; uptime
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kv/test_stream_flag.py tests/kv/test_cold_attention.py tests/kv/test_runner_tiers.py 2>&1 | tail -3 | tee $OUT/gpu_tests.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py -k "attention_cpu or split or cold" 2>&1 | tail -2 | tee -a $OUT/gpu_tests.txt
timeout 150 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A14 "calibration saved" $OUT/calibrate.txt | grep -E "stream|cpu_attn|host_read"
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --ctx 131072 --new-tokens 32"
run() { date -u; timeout 130 python3 -m kvspill.bench "$@" --out $OUT/bench.jsonl 2>&1 | grep -v Warning | tail -1 | cut -c1-100; }
run $A --cold-attention stream
run $A --cold-attention split
date -u; timeout 130 python3 bench/results/2026-11-27-h200-split-gpu-waits/split_trace.py $A --cold-attention split --mode split-trace --out $OUT/bench.jsonl 2>&1 | grep -v Warning | tail -1
run --shape llama-1b --cap-gib 16 --cpu-kv-gib 6 --ctx 32768 131072 --new-tokens 32 --attention cpu --mode w1-attention-cpu
run $A --cold-attention cpu
date -u
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/bench.jsonl"):
    d = json.loads(l)
    print(d["mode"], d["ctx"], d["decode_tok_s"], d.get("plan_decode_tok_s"), {k: v for k, v in d.items() if k.startswith("cold_c") or k.startswith("cold_s")})
PY
