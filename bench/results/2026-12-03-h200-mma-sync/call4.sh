#!/usr/bin/env bash
# direct_x (no words_x launch) against the words form; Q6_K at 4 tokens; kernel table at 8 x 2K.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
D=.devbench/s43; L=$OUT/call4.log; P=$OUT/prof4.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 90 python3 $D/direct.py $OUT/direct8.json 8 > $OUT/direct8.log 2>&1; echo "direct8 rc $?: $(tail -1 $OUT/direct8.log)" | tee -a $L
pd() { echo "== $*" >> $P; timeout 60 python3 "$@" >> $P 2>&1; echo "$1 rc $?: $(grep -E 'engine.step' $P | tail -1)" | tee -a $L; }
A="kvspill.bench.profile_decode --shape llama-8b:q4_k_m --ctx 2048 --steps 100 --kv-cache-memory 8GiB"
echo "-- 8: table" | tee -a $L; pd -m $A --concurrency 8
echo "-- 8: direct" | tee -a $L; KVSPILL_MMA_CONFIGS=$D/direct48.json pd -m $A --concurrency 8
echo "-- 4: table" | tee -a $L; pd -m $A --concurrency 4
echo "-- 4: Q6_K lane" | tee -a $L; KVSPILL_MMA_CONFIGS=$D/q6k4_lane.json pd -m $A --concurrency 4
echo "-- 4: direct" | tee -a $L; KVSPILL_MMA_CONFIGS=$D/direct48.json pd -m $A --concurrency 4
echo "-- 1: table" | tee -a $L; pd -m $A --concurrency 1
echo "-- 8: table, PDL off, kernels" | tee -a $L; KVSPILL_PDL=0 pd -m $A --concurrency 8 --kernels 10
echo "-- 8: table again" | tee -a $L; pd -m $A --concurrency 8
echo "call 4 done at $(( $(date +%s) - T0 )) s" | tee -a $L
