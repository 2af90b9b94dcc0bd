#!/usr/bin/env bash
# Trigger-first per kernel site (rope -> attention launches during the qkv GEMV and prefetches its
# split's K/V; merge; dense/fp8 GEMV), batch-1 8K steps and the 8 x 2K Q4_K_M step; then GPU tests.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callB.log; P=$OUT/profB.txt
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
declare -A V=( [base]="" [RA2]="KVSPILL_PDL_TRIGGER=rope,attn KVSPILL_ATTN_PREFETCH=2"
  [RAM2]="KVSPILL_PDL_TRIGGER=rope,attn,merge KVSPILL_ATTN_PREFETCH=2" [F]="KVSPILL_PDL_TRIGGER=fp8"
  [RAF2]="KVSPILL_PDL_TRIGGER=rope,attn,fp8 KVSPILL_ATTN_PREFETCH=2" [R0]="KVSPILL_PDL_TRIGGER=rope,attn" )
pd() {  # variant shape ctx conc
  echo "== $1 $2 $3 x$4" >> $P
  env ${V[$1]} timeout 90 python3 -m kvspill.bench.profile_decode --shape $2 --ctx $3 --concurrency $4 --steps 100 --kv-cache-memory 8GiB >> $P 2>&1
  echo "$1 $2 ctx $3 x$4 rc $?: $(grep engine.step $P | tail -1)" | tee -a $L
}
for v in base RA2 RAM2 F RAF2 R0 base; do pd $v llama-1b 8192 1; done
for v in base RA2 F RAF2; do pd $v llama-8b:fp8 8192 1; done
for v in base F RAF2; do pd $v llama-8b 8192 1; done
for v in base RA2 RAM2; do pd $v llama-8b:q4_k_m 8192 1; done
for v in base RA2; do pd $v llama-8b:q4_k_m 2048 8; done
env ${V[RAF2]} timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_attention.py tests/kernels/test_pdl.py tests/kernels/test_rope_store.py tests/kernels/test_fp8_gemv.py > $OUT/testsB.log 2>&1; echo "tests rc $?: $(tail -1 $OUT/testsB.log)" | tee -a $L
echo "call B done at $(( $(date +%s) - T0 )) s" | tee -a $L
