#!/usr/bin/env bash
# Session 32 call F: concurrent_bench's budgets at the ITL cap (0d...): pure decode steps at 16 / 32 x 2K
# with the default ITL budget, random 8B Q4_K weights, 16 GiB.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; git log -1 --format=%h 2>/dev/null
timeout 150 python3 -m kvspill.bench.concurrent_bench --shape llama-8b:q4_k --vram-budget 16GiB --ctx 2048 --concurrency 16 32 \
  --new-tokens 32 --out $OUT/w6_itl.jsonl > $OUT/w6_itl.log 2>&1; echo "rc $?"
python3 -c "
import json
for l in open('$OUT/w6_itl.jsonl'):
    r=json.loads(l); i=r.get('itl_ms') or {}
    print(r['concurrency'], r.get('ok'), 'pure steps', r.get('pure_decode_steps'), 'decode', r.get('decode_tok_s'), 'out', r.get('output_tok_s'), 'itl p50/p99', round(i.get('p50') or 0,2), round(i.get('p99') or 0,2), 'peak', r.get('peak_gpu_reserved_gib'))"
tail -3 $OUT/w6_itl.log | cut -c1-300
