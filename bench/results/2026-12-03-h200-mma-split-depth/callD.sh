#!/usr/bin/env bash
set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callD.log; P=$OUT/profD.txt
timeout 230 python3 .devbench/s40/mma_shapes.py $OUT/mma_shapes16.json 16 > $OUT/mma_shapes16.log 2>&1; echo "mma_shapes16 rc $?: $(tail -1 $OUT/mma_shapes16.log)" | tee -a $L
pd() { echo "== $*" >> $P; timeout 80 python3 "$@" >> $P 2>&1; echo "${*: -8} rc $?: $(grep -E 'engine.step' $P | tail -1)" | tee -a $L; }
A="kvspill.bench.profile_decode --shape llama-8b:q4_k_m --ctx 2048 --concurrency 16 --steps 100 --kv-cache-memory 8GiB"
[ -f $OUT/mma_shapes16.json ] && { pd -m $A; PICK_TOKENS=16 pd .devbench/s41/with_mma_picks.py $OUT/mma_shapes16.json $A; }
