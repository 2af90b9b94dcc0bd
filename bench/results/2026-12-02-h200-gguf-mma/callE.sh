#!/usr/bin/env bash
# Session 31 call E (call C again, with the kernel in the export, and D folded in): the tensor-core
# GGUF kernel's sweep while llama.cpp builds and writes the 8B Q4_K_M file on the CPU; kvspill
# 1-32 x 2K on the all-Q4_K 8B shape with and without the picked configs; then on the Q4_K_M file
# llama-batched-bench, llama-bench 8K and kvspill's concurrency rows.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 1; }
ROOT=$PWD; S=$ROOT/.devbench/s31; export PEER=$ROOT/.peer
cd .devbench/clean
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/calle.log
{ date -u; cat COMMIT; } | tee -a $L
(bash $S/llamacpp_peer.sh build > /tmp/peer_build.log 2>&1; SHAPE=8b QUANT=Q4_K_M bash $S/llamacpp_peer.sh model > /tmp/peer_model.log 2>&1; rm -f /tmp/l8b.gguf; touch /tmp/peer_ready) &
timeout 220 python3 $S/mma_sweep.py 180 > $OUT/sweep.log 2>&1; echo "sweep rc $?" | tee -a $L
grep -E "ceiling|top|PICK|done|Error" $OUT/sweep.log | cut -c1-400 | tee -a $L
run_w6() {  # mode json model-args... 
  mode=$1; J=$2; shift 2
  timeout 100 python3 $S/with_mma.py $J kvspill.bench.concurrent_bench "$@" --vram-budget 16GiB --ctx 2048 \
    --new-tokens 64 --mode $mode --out $OUT/w6.jsonl > /tmp/w6_$mode.log 2>&1; echo "w6 $mode rc $?" | tee -a $L
  head -1 /tmp/w6_$mode.log | cut -c1-300 | tee -a $L
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
for i in $(seq 1 100); do [ -f /tmp/peer_ready ] && break; sleep 2; done
{ tail -1 /tmp/peer_build.log; tail -2 /tmp/peer_model.log; ls -la /tmp/l8b*.gguf; date -u; } | tee -a $L
M=/tmp/l8b-Q4_K_M.gguf
OUT=$OUT SHAPE=8b QUANT=Q4_K_M NPL=1,2,4,8,16,32 NPP=2048 NGEN=128 T_BATCHED=120 bash $S/llamacpp_peer.sh batched | tee -a $L
OUT=$OUT SHAPE=8b QUANT=Q4_K_M DEPTHS_GPU=8192 NGEN=64 T_GPU=60 bash $S/llamacpp_peer.sh bench | tee -a $L
run_w6 file-mma $OUT/mma_best.json --model $M --concurrency 1 8 32
date -u | tee -a $L
