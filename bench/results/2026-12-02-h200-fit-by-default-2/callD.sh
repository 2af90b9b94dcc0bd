#!/usr/bin/env bash
# Session 29 call D, from a clean export of HEAD (.devbench/clean): the mixed-graph replay test on CUDA;
# 3B serve start-up twice with a writable bytecode cache (issue 50); then issue 55 in one call: the
# concurrent bench on three shapes and bench serve at concurrency 32.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 1; }
ROOT=$PWD; S=$ROOT/.devbench/s29
cd .devbench/clean
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; cat COMMIT 2>/dev/null
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)"
echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}"
timeout 150 python3 -m pytest -x -q -p no:cacheprovider tests/runner/test_mixed_graphs.py 2>&1 | tail -4
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pyc  # the bytecode a pip install writes
for run in 1 2 3; do
  export START=$(date +%s.%N)
  (python3 -m kvspill serve --model random:llama-3b --max-model-len 32768 --port 8100 2>&1 | python3 $ROOT/.devbench/s27/ts.py > $OUT/serve3b_ts_$run.log) &
  timeout 120 python3 $ROOT/.devbench/s27/client.py 8100 wait
  timeout 60 python3 $ROOT/.devbench/s27/client.py 8100 ttft $run
  pkill -TERM -f "kvspill serve"; sleep 3
  grep -E "memory plan before|Uvicorn running|start-up|engine ready" $OUT/serve3b_ts_$run.log | cut -c1-300
done
date -u
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > $OUT/smi_bench.txt &
SMI=$!
for spec in "llama-8b:q4_k 16GiB q4k" "llama-8b 24GiB bf16" "llama-3b 16GiB l3b"; do
  set -- $spec
  timeout 150 python3 $S/diag55.py --shape $1 --vram-budget $2 --ctx 2048 --concurrency 1 8 16 32 64 --new-tokens 64 \
    --out $OUT/after_$3.jsonl > $OUT/diag_$3.log 2>&1; echo "$3 rc $?"
  python3 -c "
import json
for l in open('$OUT/after_$3.jsonl'):
    r=json.loads(l); i=r.get('itl_ms') or {}
    print(r['concurrency'], r.get('ok'), r.get('decode_tok_s'), r.get('output_tok_s'), 'ttft50', (r.get('ttft_ms') or {}).get('p50'), 'itl', i.get('p50'), i.get('p99'), round((i.get('p99') or 0)/(i.get('p50') or 1),2), 'res', r.get('peak_gpu_reserved_gib'), 'steps', r.get('steps'))
    if r['concurrency'] == 8: print('  slowest', r.get('slowest_steps'))
"
  grep -cE "step failed|retry|out of memory" $OUT/diag_$3.log
  echo "smi peak so far $(sort -n $OUT/smi_bench.txt | tail -1)"
done
kill $SMI
date -u
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > $OUT/smi_serve.txt &
SMI=$!
export START=$(date +%s.%N)
python3 -m kvspill serve --model random:llama-8b:q4_k --vram-budget 16GiB --max-model-len 4096 --port 8100 > $OUT/serve.log 2>&1 &
P=$!
timeout 100 python3 $ROOT/.devbench/s27/client.py 8100 wait
timeout 120 python3 -m kvspill bench serve --url http://127.0.0.1:8100 --concurrency 32 --num-requests 96 \
  --prompt-len 2048 --max-tokens 64 --max-token-id 30000 --out $OUT/bench_serve_c32.jsonl 2>/dev/null | tail -9
kill -TERM $P; wait $P
kill $SMI
echo "serve smi peak MiB $(sort -n $OUT/smi_serve.txt | tail -1)"
grep -cE "step failed|out of memory" $OUT/serve.log
date -u
cd $OUT && tar -czf d.tgz *.log *.txt *.jsonl 2>/dev/null
