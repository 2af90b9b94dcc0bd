#!/usr/bin/env bash
# Session 15, call A: calibrate; W3 128K stream / split / fp8 auto (the startup plan with the RoPE
# table and the 640 MiB runtime reserve); W1 all KV in RAM at 128K; then build llama.cpp.
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; nproc; free -g | head -2
timeout 110 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A16 "calibration saved" $OUT/calibrate.txt | head -18
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32 --ctx 131072"
run() { date -u; timeout 130 python3 -m kvspill.bench "$@" 2>&1 | grep -iv warning | tail -1 | cut -c1-100; }
run $A --cold-attention stream --mode stream-128k --out $OUT/w3.jsonl
run $A --cold-attention split --mode split-128k --out $OUT/w3.jsonl
run $A --kv-cache-dtype fp8 --mode auto-fp8-128k --out $OUT/w3.jsonl
run --shape llama-1b --cap-gib 16 --cpu-kv-gib 6 --ctx 131072 --new-tokens 32 --attention cpu --mode w1-all-kv-in-ram --out $OUT/w1.jsonl
date -u
python3 .devbench/s15/show.py $OUT/w3.jsonl; python3 .devbench/s15/show.py $OUT/w1.jsonl
# llama.cpp: build and the 1B model in the background (they outlive this call while the machine is warm)
setsid nohup bash -c 'date -u; PEER=.peer bash .devbench/llamacpp_peer.sh build; date -u; PEER=.peer SHAPE=1b bash .devbench/llamacpp_peer.sh model; date -u; touch /tmp/lcpp-ready' > /tmp/lcpp-setup.log 2>&1 < /dev/null &
while [ ! -f /tmp/lcpp-ready ] && [ $(( $(date +%s) - T0 )) -lt 575 ]; do sleep 5; done
tail -5 /tmp/lcpp-setup.log; ls /tmp/lcpp-ready 2>/dev/null; date -u
