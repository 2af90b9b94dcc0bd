#!/usr/bin/env bash
# Call C (fresh machine, carry [".whl", ".devbench"]): Q6_K int16 now default. Re-run W3 / W5 rows, 8K batch-1
# W1 / 8B bf16 / 8B fp8 / random Q4_K_M steps, and the 8 x 2K step's kernel table (PDL off).
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callC.log; P=$OUT/prof.txt
{ date -u; git log --oneline | head -1; git status --short | grep -v "^??" | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
pd() { echo "== $*" >> $P; timeout $1 python3 -m kvspill.bench.profile_decode "${@:2}" >> $P 2>&1; echo "$* rc $?: $(grep engine.step $P | tail -1)" | tee -a $L; }
pd 50 --shape llama-1b --ctx 8192 --steps 100 --kv-cache-memory 8GiB
pd 60 --shape llama-8b --ctx 8192 --steps 100 --kv-cache-memory 8GiB
pd 60 --shape llama-8b:fp8 --ctx 8192 --steps 100 --kv-cache-memory 8GiB
pd 60 --shape llama-8b:q4_k_m --ctx 8192 --steps 100 --kv-cache-memory 8GiB
KVSPILL_PDL=0 pd 60 --shape llama-8b:q4_k_m --ctx 2048 --concurrency 8 --steps 50 --kernels 30 --kv-cache-memory 8GiB
echo "profiles done at $(( $(date +%s) - T0 )) s" | tee -a $L
run() { echo "== $* at $(( $(date +%s) - T0 )) s" | tee -a $L; timeout $1 python3 -m kvspill.bench "${@:2}" --out $OUT/rows.jsonl > $OUT/last.log 2>&1; echo "rc $?: $(grep -v Warning $OUT/last.log | tail -1 | cut -c1-200)" | tee -a $L; }
A="--shape llama-8b --vram-budget 24GiB --cpu-kv-budget 40GiB --new-tokens 32"
run 70 $A --ctx 32768 --mode w3-32k
run 90 $A --ctx 131072 --cold-attention split --mode w3-split
run 90 $A --ctx 131072 --cold-attention stream --kv-cache-dtype fp8 --mode w3-fp8-stream
run 100 --shape llama-8b --vram-budget 24GiB --cpu-kv-budget 18GiB --ctx 131072 --new-tokens 32 --cold-attention sparse --sparse-budget-tokens 4096 --mode w5-sparse
python3 - <<'PY' | tee -a $L
import json, os
for l in open(os.environ["OUT"] + "/rows.jsonl"):
    d = json.loads(l); p = d.get("plan_decode_tok_s")
    print(d["mode"], d["ctx"], d["decode_tok_s"], d.get("ttft_s"), p, round(p / d["decode_tok_s"], 2) if p else None, d.get("floor_ratio"))
PY
echo "call C done at $(( $(date +%s) - T0 )) s" | tee -a $L
