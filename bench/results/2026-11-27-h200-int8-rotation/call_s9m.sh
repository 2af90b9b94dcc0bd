#!/usr/bin/env bash
# Dev only: where int8 KV decode loses to bf16 at 8K (issue 12): profile 8 decode steps of each.
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
date -u
for d in int8 auto; do
  timeout 200 python3 .devbench/sparse_prof.py --shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 8192 --cold-attention stream --kv-cache-dtype $d > $OUT/prof_$d.log 2>&1; echo "== $d rc=$?"
  grep -E "ttft|ms/step|Traceback|Error" $OUT/prof_$d.log | tail -4
  grep -A 22 "Self CUDA" $OUT/prof_$d.log | head -24 | cut -c1-90,150-185
  date -u
done
