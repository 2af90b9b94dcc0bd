#!/usr/bin/env bash
# Sweeps at 16 and 4 tokens; engine rows of the new table (code) at 1/4/8/16/32 x 2K, before (old table, 16-token tiles) at 16/32, 16-token alternatives.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
D=.devbench/s43; L=$OUT/call2.log; P=$OUT/prof2.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 120 python3 $D/mma_v2.py $OUT/sweep16.json 16 > $OUT/sweep16.log 2>&1; echo "sweep16 rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/sweep16.log)" | tee -a $L
timeout 100 python3 $D/mma_v2.py $OUT/sweep4.json 4 > $OUT/sweep4.log 2>&1; echo "sweep4 rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/sweep4.log)" | tee -a $L
pd() { echo "== $*" >> $P; timeout 60 python3 "$@" >> $P 2>&1; echo "$1 rc $?: $(grep -E 'engine.step' $P | tail -1)" | tee -a $L; }
A="kvspill.bench.profile_decode --shape llama-8b:q4_k_m --ctx 2048 --steps 100"
for c in 8 1 4 16 32; do m=8GiB; [ $c = 32 ] && m=12GiB; echo "-- new, $c x 2K" | tee -a $L; pd -m $A --concurrency $c --kv-cache-memory $m; done
echo "-- 16: Q4_K sync" | tee -a $L; KVSPILL_MMA_CONFIGS=$D/q4k16_sync.json pd -m $A --concurrency 16 --kv-cache-memory 8GiB
echo "-- 16: Q6_K n64" | tee -a $L; KVSPILL_MMA_CONFIGS=$D/q6k16_n64.json pd -m $A --concurrency 16 --kv-cache-memory 8GiB
for c in 16 32; do m=8GiB; [ $c = 32 ] && m=12GiB; echo "-- old, $c x 2K" | tee -a $L; TMIN=16 KVSPILL_MMA_CONFIGS=$D/old.json pd $D/with_cfg.py $A --concurrency $c --kv-cache-memory $m; done
echo "call 2 done at $(( $(date +%s) - T0 )) s" | tee -a $L
