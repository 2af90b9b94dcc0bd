#!/usr/bin/env bash
# Next session, one fresh call (carry [".whl", ".devbench"]): (1) GPU tests of the touched paths; (2) Q4_K_M q+k
# merge: random llama-8b:q4_k_m at 8K batch 1 and 8 x 2K, 7a290d1 (before) beside HEAD; (3) the mixed graphs'
# new reserve: W3 128K fp8 stream (898e54f gave 35.23 on one card, HEAD-before 29.22), and 8 / 64 x 2K at 16 GiB
# (0 failed steps, card peak under 16 GiB).
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1
L=$OUT/callF.log; P=$OUT/prof.txt
{ date -u; git log --oneline | head -1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
(PYTHONPATH=/tmp/site:$PWD timeout 200 python3 -m pytest -q -p no:cacheprovider tests/runner/test_mixed_graphs.py tests/model/test_quant_linear_shards.py tests/engine/test_gpu.py -k "mixed or quant or shards" > $OUT/tests.log 2>&1; echo "tests rc $?: $(tail -1 $OUT/tests.log)" | tee -a $L)
pd() { echo "== $*" >> $P; (cd $2 && PYTHONPATH=/tmp/site:$PWD timeout $1 python3 -m kvspill.bench.profile_decode "${@:3}" >> $P 2>&1); echo "$2 ${*:3} rc $?: $(grep engine.step $P | tail -1)" | tee -a $L; }
for tree in .devbench/old7a2 .; do
  pd 60 $tree --shape llama-8b:q4_k_m --ctx 8192 --steps 100 --kv-cache-memory 8GiB
  pd 60 $tree --shape llama-8b:q4_k_m --ctx 2048 --concurrency 8 --steps 100 --kv-cache-memory 8GiB
done
echo "profiles done at $(( $(date +%s) - T0 )) s" | tee -a $L
PYTHONPATH=/tmp/site:$PWD timeout 90 python3 -m kvspill.bench --shape llama-8b --vram-budget 24GiB --cpu-kv-budget 40GiB --new-tokens 32 --ctx 131072 --cold-attention stream --kv-cache-dtype fp8 --mode w3-fp8-stream --out $OUT/rows.jsonl > $OUT/w3.log 2>&1
echo "w3 fp8 rc $?: $(python3 -c "import json;d=[json.loads(l) for l in open('$OUT/rows.jsonl')][-1];print(d['decode_tok_s'],d['gpu_kv_gib'],d['cold_tokens'],d['card_used_gib'])")" | tee -a $L
PYTHONPATH=/tmp/site:$PWD timeout 200 python3 -m kvspill.bench.concurrent_bench --shape llama-8b:q4_k --vram-budget 16GiB --ctx 2048 --concurrency 8 64 --new-tokens 64 --out $OUT/concurrent.jsonl > $OUT/concurrent.log 2>&1
echo "concurrent rc $?" | tee -a $L; python3 -c "
import json
for l in open('$OUT/concurrent.jsonl'):
    d=json.loads(l); print({k: v for k, v in d.items() if any(w in k for w in ('concurrency','tok_s','fail','peak','card','gpu_kv'))})" | tee -a $L
echo "call F done at $(( $(date +%s) - T0 )) s" | tee -a $L
