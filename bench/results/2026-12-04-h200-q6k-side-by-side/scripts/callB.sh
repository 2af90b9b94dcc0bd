#!/usr/bin/env bash
# Q6_K one-token kernel with NB blocks side by side: sweep vs the committed kernel, then engine A/B at 8K / 32K.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=bench/results/2026-12-04-h200-q6k-side-by-side/scripts; L=$OUT/callB.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
SWEEP_S=210 timeout 290 python3 $S/q6sweep2.py $OUT 2>&1 | grep -v Warn | tee -a $L
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB"
Q6PICKS=$OUT/q6picks.json timeout 90 python3 $S/prof_q6b.py $A --ctx 8192 > $OUT/warm.txt 2>&1
for i in 1 2; do for ctx in 8192 32768; do for v in old picks; do
  [ $(( $(date +%s) - T0 )) -lt 500 ] || break 3
  if [ $v = picks ]; then E="Q6PICKS=$OUT/q6picks.json Q6OLD="; else E="Q6PICKS= Q6OLD=1"; fi
  env $E timeout 40 python3 $S/prof_q6b.py $A --ctx $ctx > $OUT/prof_${v}_${ctx}_$i.txt 2>&1
  echo "$v $ctx $i rc $?: $(grep -E 'engine.step|plan |Q6_K' $OUT/prof_${v}_${ctx}_$i.txt | tr '\n' ' ')" | tee -a $L
done; done; done
(cd $OUT && tar czf all.tgz *.txt && rm -f prof_*.txt warm.txt)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
