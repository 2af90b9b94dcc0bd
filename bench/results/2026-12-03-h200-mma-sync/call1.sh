#!/usr/bin/env bash
# mma.sync words form + 8-token tiles: per-shape sweep at 8 tokens, engine 8 x 2K, sweep at 32.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
D=.devbench/s43; L=$OUT/call1.log; P=$OUT/prof1.txt
{ date -u; git log --oneline | head -1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import triton, torch; print(triton.__version__, torch.__version__)"; } | tee -a $L
timeout 230 python3 $D/mma_v2.py $OUT/sweep8.json 8 > $OUT/sweep8.log 2>&1; echo "sweep8 rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/sweep8.log)" | tee -a $L
pd() { echo "== $*" >> $P; timeout 70 python3 "$@" >> $P 2>&1; echo "$1 rc $?: $(grep -E 'engine.step' $P | tail -1)" | tee -a $L; }
A="kvspill.bench.profile_decode --shape llama-8b:q4_k_m --ctx 2048 --concurrency 8 --steps 100 --kv-cache-memory 8GiB"
echo "-- today (T16)" | tee -a $L; TMIN=16 pd $D/with_cfg.py $A
echo "-- rule v2n64" | tee -a $L; TMIN=8 KVSPILL_MMA_CONFIGS=$D/rule_v2n64.json pd $D/with_cfg.py $A
echo "-- rule v2n32" | tee -a $L; TMIN=8 KVSPILL_MMA_CONFIGS=$D/rule_v2n32.json pd $D/with_cfg.py $A
[ -f $OUT/sweep8.json ] && { echo "-- picks8" | tee -a $L; TMIN=8 PICKS=$OUT/sweep8.json pd $D/with_cfg.py $A; }
echo "at $(( $(date +%s) - T0 )) s" | tee -a $L
timeout $(( 560 - ($(date +%s) - T0) )) python3 $D/mma_v2.py $OUT/sweep32.json 32 > $OUT/sweep32.log 2>&1; echo "sweep32 rc $?: $(tail -1 $OUT/sweep32.log)" | tee -a $L
echo "call 1 done at $(( $(date +%s) - T0 )) s" | tee -a $L
