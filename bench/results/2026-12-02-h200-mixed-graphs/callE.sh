#!/usr/bin/env bash
# Session 29 call E (after the one-stream capture fix and 64-decode mixed graphs), clean export of HEAD:
# the mixed-graph replay test on CUDA; issue 55's runs (q4k first: it ran over the budget in call D);
# bench serve c32; greedy tokens with mixed graphs on and off.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 1; }
ROOT=$PWD; S=$ROOT/.devbench/s29
cd .devbench/clean
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; cat COMMIT
timeout 70 python3 -m pytest -x -q -p no:cacheprovider tests/runner/test_mixed_graphs.py -k replay > $OUT/pytest_gpu.txt 2>&1; tail -1 $OUT/pytest_gpu.txt
grep -E "^E |Mismatch|Greatest" $OUT/pytest_gpu.txt | head -8
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > $OUT/smi_bench.txt &
SMI=$!
for spec in "llama-8b:q4_k 16GiB q4k" "llama-8b 24GiB bf16" "llama-3b 16GiB l3b"; do
  set -- $spec
  : > $OUT/smi_bench.txt
  timeout 100 python3 $S/diag55.py --shape $1 --vram-budget $2 --ctx 2048 --concurrency 1 8 16 32 64 --new-tokens 64 \
    --out $OUT/after_$3.jsonl > $OUT/diag_$3.log 2>&1; echo "$3 rc $?"
  python3 -c "
import json
for l in open('$OUT/after_$3.jsonl'):
    r=json.loads(l); i=r.get('itl_ms') or {}
    print(r['concurrency'], r.get('ok'), r.get('decode_tok_s'), r.get('output_tok_s'), 'ttft50', round((r.get('ttft_ms') or {}).get('p50') or 0), 'itl', round(i.get('p50') or 0, 2), round(i.get('p99') or 0, 2), round((i.get('p99') or 0)/(i.get('p50') or 1),2), 'res', r.get('peak_gpu_reserved_gib'))
"
  grep -hE "POOLS_MiB|over the|captured" $OUT/diag_$3.log | cut -c1-220
  grep -cE "step failed|retry|out of memory" $OUT/diag_$3.log
  echo "$3 smi peak $(sort -n $OUT/smi_bench.txt | tail -1) MiB of budget $2"
  if [ $3 = q4k ]; then
    : > $OUT/smi_bench.txt
    python3 -m kvspill serve --model random:llama-8b:q4_k --vram-budget 16GiB --max-model-len 4096 --port 8100 > $OUT/serve.log 2>&1 &
    P=$!
    export START=$(date +%s.%N); timeout 60 python3 $ROOT/.devbench/s27/client.py 8100 wait
    timeout 60 python3 -m kvspill bench serve --url http://127.0.0.1:8100 --concurrency 32 --num-requests 96 \
      --prompt-len 2048 --max-tokens 64 --max-token-id 30000 --out $OUT/bench_serve_c32.jsonl 2>/dev/null | head -7
    kill -TERM $P; wait $P
    echo "serve smi peak $(sort -n $OUT/smi_bench.txt | tail -1) MiB"; grep -E "over the|KV pool" $OUT/serve.log | cut -c1-200
  fi
done
kill $SMI
date -u
timeout 90 python3 $S/mixed_tokens.py llama-3b 16GiB 2>&1 | grep -vi warn | tail -3
date -u
cd $OUT && tar -czf e.tgz *.log *.txt *.jsonl 2>/dev/null
