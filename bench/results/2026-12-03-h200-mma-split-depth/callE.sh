#!/usr/bin/env bash
set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callE.log; P=$OUT/profE.txt
pd() { echo "== $*" >> $P; timeout 80 python3 "$@" >> $P 2>&1; echo "${*: -8} rc $?: $(grep -E 'engine.step' $P | tail -1)" | tee -a $L; }
for T in 32 4; do
timeout 120 python3 .devbench/s40/mma_shapes.py $OUT/mma_shapes$T.json $T > $OUT/mma_shapes$T.log 2>&1; echo "mma_shapes$T rc $?: $(tail -1 $OUT/mma_shapes$T.log)" | tee -a $L
A="kvspill.bench.profile_decode --shape llama-8b:q4_k_m --ctx 2048 --concurrency $T --steps 60 --kv-cache-memory 8GiB"
[ -f $OUT/mma_shapes$T.json ] && { pd -m $A; PICK_TOKENS=$T pd .devbench/s41/with_mma_picks.py $OUT/mma_shapes$T.json $A; }
done
