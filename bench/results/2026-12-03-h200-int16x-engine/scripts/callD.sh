#!/usr/bin/env bash
# Call D (fresh machine, carry [".whl", ".devbench"]): W3 128K rows, today's code beside 898e54f (2026-11-29's rows) on one card.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1
L=$OUT/callD.log
{ date -u; git log --oneline | head -1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
run() { echo "== $2 $3 at $(( $(date +%s) - T0 )) s" | tee -a $L; (cd $2 && PYTHONPATH=/tmp/site:$PWD timeout $1 python3 -m kvspill.bench "${@:3}" --out $OUT/rows.jsonl > $OUT/last.log 2>&1); echo "rc $?: $(grep -i "KV pool\|graph" $OUT/last.log | head -3 | cut -c1-250)" | tee -a $L; }
NEW="--shape llama-8b --vram-budget 24GiB --cpu-kv-budget 40GiB --new-tokens 32 --ctx 131072"
OLD="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32 --ctx 131072"
run 80 .devbench/old898 $OLD --cold-attention stream --kv-cache-dtype fp8 --mode old-fp8-stream
run 80 . $NEW --cold-attention stream --kv-cache-dtype fp8 --mode new-fp8-stream
KVSPILL_MIXED_CUDA_GRAPHS=0 run 80 . $NEW --cold-attention stream --kv-cache-dtype fp8 --mode new-fp8-stream-no-mixed-graphs
run 90 .devbench/old898 $OLD --cold-attention split --mode old-split
run 90 . $NEW --cold-attention split --mode new-split
python3 - <<'PY' | tee -a $L
import json, os
for l in open(os.environ["OUT"] + "/rows.jsonl"):
    d = json.loads(l)
    print(d["mode"], d["decode_tok_s"], d.get("gpu_kv_gib"), d.get("cold_tokens"), d.get("cold_cpu_gbs"), d.get("sized_activation_gib"), d.get("card_used_gib"), d.get("peak_gpu_reserved_gib"))
PY
echo "call D done at $(( $(date +%s) - T0 )) s" | tee -a $L
