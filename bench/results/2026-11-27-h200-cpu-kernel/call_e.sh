#!/usr/bin/env bash
# Session 12, call E: W1 all KV in RAM (--attention cpu, the new kernel) beside llama.cpp -nkvo, one call.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A16 "calibration saved" $OUT/calibrate.txt | grep -E "stream|cpu_attn|host_read"
date -u; timeout 150 python3 -m kvspill.bench --shape llama-1b --cap-gib 16 --cpu-kv-gib 6 --ctx 32768 131072 --new-tokens 32 --attention cpu --mode w1-all-kv-in-ram --out $OUT/w1_attention_cpu.jsonl 2>&1 | grep '^{' | python3 -c 'import sys,json;[print(d["ctx"], d["decode_tok_s"], d["ttft_s"], d["plan_decode_tok_s"], d["cold_cpu_gbs"]) for d in map(json.loads,sys.stdin)]'
date -u; PEER=.peer bash .devbench/llamacpp_peer.sh build > $OUT/llamacpp_build.log 2>&1; tail -2 $OUT/llamacpp_build.log
date -u; PEER=.peer SHAPE=1b bash .devbench/llamacpp_peer.sh model 2>&1 | tail -2
date -u; PEER=.peer SHAPE=1b DEPTHS_NKVO=32768,131072 NGEN=16 T_NKVO=240 bash .devbench/llamacpp_peer.sh bench 2>&1 | tail -4
date -u; ls $OUT
