#!/usr/bin/env bash
# Call 2 (2026-11-27): W1 all-KV-in-RAM (--attention cpu) beside llama.cpp -nkvo, one call.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD
date -u; nvidia-smi --query-gpu=name --format=csv,noheader; uptime
timeout 150 python3 -m kvspill doctor --calibrate --quick > $OUT/calibrate.txt 2>&1; grep -A9 "calibration saved" $OUT/calibrate.txt
date -u; timeout 200 python3 -m kvspill.bench --shape llama-1b --cap-gib 16 --cpu-kv-gib 6 --ctx 32768 131072 --new-tokens 32 --attention cpu --mode w1-all-kv-in-ram --out $OUT/w1_attention_cpu.jsonl 2>&1 | grep '^{' | python3 -c 'import sys,json;[print(d["ctx"], d["decode_tok_s"], d["ttft_s"], d["plan_decode_tok_s"]) for d in map(json.loads,sys.stdin)]'
date -u; PEER=.peer bash .devbench/llamacpp_peer.sh build
date -u; PEER=.peer SHAPE=1b bash .devbench/llamacpp_peer.sh model
date -u; PEER=.peer SHAPE=1b DEPTHS_NKVO=32768,131072 NGEN=16 T_NKVO=300 bash .devbench/llamacpp_peer.sh bench
date -u
