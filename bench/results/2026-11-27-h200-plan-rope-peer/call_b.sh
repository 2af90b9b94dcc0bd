#!/usr/bin/env bash
# Session 15, call B (same machine): llama.cpp -nkvo W1 at 128K, then kvspill W1 --attention cpu at
# 128K in the same call; W5 sparse 128K; the CUDA engine tests (the engine's sizing changed); W3 int8 split.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader; ls ~/.cache/kvspill/
if [ ! -f /tmp/lcpp-ready ]; then
  [ -f /tmp/lcpp-setup.log ] || { PEER=.peer bash .devbench/llamacpp_peer.sh build; PEER=.peer SHAPE=1b bash .devbench/llamacpp_peer.sh model; touch /tmp/lcpp-ready; }
  while [ ! -f /tmp/lcpp-ready ]; do sleep 5; done
fi
tail -3 /tmp/lcpp-setup.log 2>/dev/null; date -u
PEER=.peer SHAPE=1b DEPTHS_NKVO=131072 NGEN=16 T_NKVO=240 OUT=$OUT bash .devbench/llamacpp_peer.sh bench
run() { date -u; timeout 130 python3 -m kvspill.bench "$@" 2>&1 | grep -iv warning | tail -1 | cut -c1-100; }
run --shape llama-1b --cap-gib 16 --cpu-kv-gib 6 --ctx 131072 --new-tokens 32 --attention cpu --mode w1-all-kv-in-ram --out $OUT/w1.jsonl
run --shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --new-tokens 32 --sparse-budget-tokens 4096 --cold-attention sparse --mode w5-sparse-128k --out $OUT/w5.jsonl
date -u
python3 .devbench/s15/show.py $OUT/w1.jsonl; python3 .devbench/s15/show.py $OUT/w5.jsonl
timeout 200 python3 -m pytest -q -x tests/engine/test_gpu.py -p no:cacheprovider 2>&1 | tail -3
date -u
# int8 KV's split term is taken as fp8's (not measured): one W3 128K int8 split row if time is left
run --shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32 --ctx 131072 --kv-cache-dtype int8 --cold-attention split --mode split-int8-128k --out $OUT/w3_int8.jsonl
python3 .devbench/s15/show.py $OUT/w3_int8.jsonl; date -u
