#!/usr/bin/env bash
# Session 31 call A, clean export of HEAD (mixed-step graphs on by default): the GPU replay tests;
# greedy tokens with graphs off/on; issue 55's runs on three shapes; bench serve c32.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 1; }
ROOT=$PWD; S=$ROOT/.devbench/s31
cd .devbench/clean
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; cat COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/runner/test_mixed_graphs.py > $OUT/pytest_gpu.txt 2>&1; tail -3 $OUT/pytest_gpu.txt
grep -E "^E |Mismatch|Greatest|FAILED|passed|skipped" $OUT/pytest_gpu.txt | head -12
for g in 0 1; do KVSPILL_MIXED_CUDA_GRAPHS=$g timeout 90 python3 $S/mixed_tokens.py llama-3b 16GiB $OUT/tok_$g.json 2>&1 | grep -E "^steps|Error|error" | tail -2; done
python3 -c "
import json
a=json.load(open('$OUT/tok_0.json')); b=json.load(open('$OUT/tok_1.json'))
eq=sum(x==y for p,q in zip(a,b) for x,y in zip(p,q)); n=sum(len(p) for p in a)
first=[next((i for i,(x,y) in enumerate(zip(p,q)) if x!=y), None) for p,q in zip(a,b)]
print('greedy tokens equal', eq, 'of', n, 'first divergence per request', first)
"
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > $OUT/smi_bench.txt &
SMI=$!
for spec in "llama-8b:q4_k 16GiB q4k" "llama-8b 24GiB bf16" "llama-3b 16GiB l3b"; do
  set -- $spec
  : > $OUT/smi_bench.txt
  timeout 110 python3 $S/diag55.py --shape $1 --vram-budget $2 --ctx 2048 --concurrency 1 8 16 32 64 --new-tokens 64 \
    --out $OUT/after_$3.jsonl > $OUT/diag_$3.log 2>&1; echo "$3 rc $?"
  python3 -c "
import json
for l in open('$OUT/after_$3.jsonl'):
    r=json.loads(l); i=r.get('itl_ms') or {}
    print(r['concurrency'], r.get('ok'), r.get('decode_tok_s'), r.get('output_tok_s'), 'ttft50', round((r.get('ttft_ms') or {}).get('p50') or 0), 'itl', round(i.get('p50') or 0, 2), round(i.get('p99') or 0, 2), round((i.get('p99') or 0)/(i.get('p50') or 1),2), 'res', r.get('peak_gpu_reserved_gib'))
"
  grep -hE "over the|captured" $OUT/diag_$3.log | cut -c1-200
  echo "failed/retried lines: $(grep -cE 'step failed|retry|out of memory' $OUT/diag_$3.log)"
  echo "$3 smi peak $(sort -n $OUT/smi_bench.txt | tail -1) MiB of budget $2"
  if [ $3 = q4k ]; then
    : > $OUT/smi_bench.txt
    python3 -m kvspill serve --model random:llama-8b:q4_k --vram-budget 16GiB --max-model-len 4096 --port 8100 > $OUT/serve.log 2>&1 &
    P=$!
    timeout 90 python3 $S/wait.py 8100
    timeout 70 python3 -m kvspill bench serve --url http://127.0.0.1:8100 --concurrency 32 --num-requests 96 \
      --prompt-len 2048 --max-tokens 64 --max-token-id 30000 --out $OUT/bench_serve_c32.jsonl 2>/dev/null | head -8
    kill -TERM $P; wait $P
    echo "serve smi peak $(sort -n $OUT/smi_bench.txt | tail -1) MiB"; grep -E "over the|KV pool" $OUT/serve.log | cut -c1-200
  fi
done
kill $SMI
date -u
cd $OUT && tar -czf a.tgz *.log *.txt *.jsonl *.json 2>/dev/null
