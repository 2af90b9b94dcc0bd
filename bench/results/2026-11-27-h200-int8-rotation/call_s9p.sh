#!/usr/bin/env bash
# Dev only: int8 KV decode at 8K after rotating q, k, v as one matmul; bf16 beside it; fp32 [M,128]@[128,128] times by M.
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
python3 - <<'PY'
import torch
H = torch.randn(128, 128, device="cuda")
for m in (8, 16, 32, 48, 64, 96, 192):
    x = torch.randn(m, 128, device="cuda")
    for _ in range(3): x @ H
    torch.cuda.synchronize(); s, e = torch.cuda.Event(True), torch.cuda.Event(True); s.record()
    for _ in range(200): x @ H
    e.record(); torch.cuda.synchronize(); print("fp32 mm M", m, round(s.elapsed_time(e) / 200 * 1e3, 1), "us")
PY
for d in int8 auto; do
  timeout 120 python3 .devbench/sparse_prof.py --shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 8192 --cold-attention stream --kv-cache-dtype $d > $OUT/prof2_$d.log 2>&1; echo "== $d rc=$?"
  grep -E "ms/step|Traceback|Error" $OUT/prof2_$d.log | tail -2
  grep -A 5 "Self CUDA" $OUT/prof2_$d.log | head -6 | cut -c1-90,150-185
done
