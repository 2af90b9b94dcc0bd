#!/usr/bin/env bash
# Next session: re-sweep the half-group lanes' config table, then the engine with the picks, 8K / 32K, alternated.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=bench/results/2026-12-04-h200-q4k-resweep/scripts; L=$OUT/callA.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 300 python3 $S/resweep.py $OUT 2>&1 | grep -v Warn | tee -a $L
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB"
PICKS=$OUT/picks.json timeout 90 python3 $S/prof_picks.py $A --ctx 8192 > $OUT/warm.txt 2>&1
for i in 1 2; do for ctx in 8192 32768; do for v in today picks; do
  [ $(( $(date +%s) - T0 )) -lt 560 ] || break 3
  if [ $v = picks ]; then E="PICKS=$OUT/picks.json"; else E="PICKS="; fi
  env $E timeout 40 python3 $S/prof_picks.py $A --ctx $ctx > $OUT/prof_${v}_${ctx}_$i.txt 2>&1
  echo "$v $ctx $i rc $?: $(grep -E 'engine.step|plan ' $OUT/prof_${v}_${ctx}_$i.txt | tr '\n' ' ')" | tee -a $L
done; done; done
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
