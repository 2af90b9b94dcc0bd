#!/usr/bin/env bash
# Session 26, call 3 (code 1b20f6c): the skip list's GPU tests; a full calibration; W1 and split with the
# calibrated plan; W3 128K fp8 with and without a 4-layer skip list (same call).
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KVSPILL_CALIBRATION=/tmp/kvspill-cal.json
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; hostname; git log --oneline -1 2>/dev/null
timeout 220 python3 -m pytest -q -p no:cacheprovider -k "cuda or graph" tests/engine/test_kv_skip_layers.py tests/runner/test_stream_graphs.py > $OUT/gpu_tests.txt 2>&1; echo gpu tests rc $?; tail -3 $OUT/gpu_tests.txt
date -u; timeout 150 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; echo calibrate rc $?
grep -A16 "calibration saved" $OUT/calibrate.txt | grep -E "stream|cpu_attn|host_read|h2d|pcie"; cp /tmp/kvspill-cal.json $OUT/ 2>/dev/null
run() { date -u; timeout $1 python3 -m kvspill.bench "${@:2}" --out $OUT/bench.jsonl 2>&1 | grep -v Warning | tail -1 | cut -c1-160; }
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --ctx 131072 --new-tokens 32"
run 80 --shape llama-1b --cap-gib 16 --cpu-kv-gib 6 --ctx 131072 --new-tokens 32 --attention cpu --mode w1-attention-cpu
run 90 $A --cold-attention split --mode w3-split
run 80 $A --cold-attention stream --kv-cache-dtype fp8 --mode w3-fp8-stream
run 80 $A --cold-attention stream --kv-cache-dtype fp8 --kv-cache-dtype-skip-layers 0,1,30,31 --mode w3-fp8-skip4-stream
date -u
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/bench.jsonl"):
    d = json.loads(l)
    plan = d.get("plan_decode_tok_s")
    print(d["mode"], d["ctx"], d["decode_tok_s"], d.get("ttft_s"), plan, round(plan / d["decode_tok_s"], 2) if plan else None,
          {k: d.get(k) for k in ("cold_cpu_gbs", "cold_stream_gbs", "floor_tok_s", "floor_ratio", "hot_tokens", "cold_tokens", "peak_gpu_gib", "card_used_gib")})
PY
