#!/usr/bin/env bash
# Call 6: the Q6_K few-rows rule against Q6K_FEW_ROWS=0 (every Q6_K weight two rows a program, as before), 8K / 32K, alternated.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s47; L=$OUT/call6.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 100 python3 $S/prof_v.py --shape llama-8b:q4_k_m --ctx 8192 --steps 20 --kv-cache-memory 16GiB > $OUT/warm.txt 2>&1; echo "warm-up rc $?" | tee -a $L
run() {  # name env args...
  local n=$1 e=$2; shift 2
  [ $(( $(date +%s) - T0 )) -lt 235 ] || { echo "skip $n"; return; }
  env $e timeout 45 python3 $S/prof_v.py "$@" > $OUT/prof_$n.txt 2>&1
  echo "$n ($e) rc $?: $(grep -E 'engine.step|plan ' $OUT/prof_$n.txt | head -2 | tr '\n' ' ')" | tee -a $L
}
for i in 1 2; do for ctx in 8192 32768; do
  run old_${ctx}_$i "FEW=0" --shape llama-8b:q4_k_m --ctx $ctx --steps 100 --kv-cache-memory 16GiB
  run new_${ctx}_$i "FEW=1" --shape llama-8b:q4_k_m --ctx $ctx --steps 100 --kv-cache-memory 16GiB
done; done
(cd $OUT && tar czf prof.tgz prof_*.txt && rm -f prof_*.txt)
echo "call 6 done at $(( $(date +%s) - T0 )) s" | tee -a $L
