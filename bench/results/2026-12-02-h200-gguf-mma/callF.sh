#!/usr/bin/env bash
# Session 31 call F: the Q4_K tensor-core kernel v2 (x sums computed once, magic-number nibbles,
# 32-128-row tiles, 3 stages) swept with a correctness check; then the 8B Q4_K shape at 1-32 x 2K with
# the picks and without (the old paths), in the same call.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 1; }
ROOT=$PWD; S=$ROOT/.devbench/s31
cd .devbench/clean
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callf.log
{ date -u; cat COMMIT; } | tee -a $L
timeout 200 python3 $S/mma_sweep.py 165 > $OUT/sweep.log 2>&1; echo "sweep rc $?" | tee -a $L
grep -E "ceiling|top|PICK|done|Error" $OUT/sweep.log | cut -c1-500 | tee -a $L
run_w6() {
  mode=$1; J=$2; shift 2
  timeout 95 python3 $S/with_mma.py $J kvspill.bench.concurrent_bench "$@" --vram-budget 16GiB --ctx 2048 \
    --new-tokens 64 --mode $mode --out $OUT/w6.jsonl > /tmp/w6_$mode.log 2>&1; echo "w6 $mode rc $?" | tee -a $L
  head -1 /tmp/w6_$mode.log | cut -c1-400 | tee -a $L
  python3 -c "
import json
for l in open('$OUT/w6.jsonl'):
    r=json.loads(l)
    if r.get('mode') != '$mode': continue
    i=r.get('itl_ms') or {}
    print('$mode', r.get('shape'), r['concurrency'], r.get('ok'), 'decode', r.get('decode_tok_s'), 'out', r.get('output_tok_s'), 'itl p50/p99', round(i.get('p50') or 0,2), round(i.get('p99') or 0,2), 'floor', r.get('floor_ratio'))" | tee -a $L
}
run_w6 shape-mma $OUT/mma_best.json --shape llama-8b:q4_k --concurrency 1 2 4 8 16 32
run_w6 shape-off off --shape llama-8b:q4_k --concurrency 1 2 4 8 16 32
date -u | tee -a $L
