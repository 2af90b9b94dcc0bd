#!/usr/bin/env bash
# PDL trigger placement, attention K/V prefetch before the wait, V loaded with K: batch-1 8K steps
# (W1, 8B fp8 / bf16 / Q4_K_M) and the 8 x 2K Q4_K_M step, each variant in its own process.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callA.log; P=$OUT/prof.txt
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
declare -A V=( [base]="" [T]="KVSPILL_PDL_TRIGGER=early" [P]="KVSPILL_ATTN_PREFETCH=1" [V]="KVSPILL_ATTN_V_EARLY=1"
  [TPV]="KVSPILL_PDL_TRIGGER=early KVSPILL_ATTN_PREFETCH=1 KVSPILL_ATTN_V_EARLY=1" [TP]="KVSPILL_PDL_TRIGGER=early KVSPILL_ATTN_PREFETCH=1" )
pd() {  # variant shape ctx conc
  echo "== $1 $2 $3 x$4" >> $P
  env ${V[$1]} timeout 90 python3 -m kvspill.bench.profile_decode --shape $2 --ctx $3 --concurrency $4 --steps 100 --kv-cache-memory 8GiB >> $P 2>&1
  echo "$1 $2 ctx $3 x$4 rc $?: $(grep engine.step $P | tail -1)" | tee -a $L
}
for v in base T P V TPV TP base; do pd $v llama-1b 8192 1; done
for v in base T P TPV TP; do pd $v llama-8b:fp8 8192 1; done
for v in base TPV; do pd $v llama-8b 8192 1; done
for v in base T P TPV; do pd $v llama-8b:q4_k_m 8192 1; done
for v in base T TPV; do pd $v llama-8b:q4_k_m 2048 8; done
echo "call A done at $(( $(date +%s) - T0 )) s" | tee -a $L
