#!/usr/bin/env bash
# Call 5: Q6_K few-rows rule (working tree) against v on the old config, 8K and 32K; Q4_K few-rows sweep; GPU tests.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s47; L=$OUT/call5.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 80 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_int16x.py tests/kernels/test_gguf_gemv.py > $OUT/tests.log 2>&1; echo "tests rc $?" | tee -a $L; tail -2 $OUT/tests.log | tee -a $L
timeout 90 python3 $S/few_rows_sweep.py $OUT 2>&1 | grep -v Warn | tee -a $L
echo "sweep done at $(( $(date +%s) - T0 )) s" | tee -a $L
run() {  # name env args...
  local n=$1 e=$2; shift 2
  [ $(( $(date +%s) - T0 )) -lt 330 ] || { echo "skip $n"; return; }
  env $e timeout 45 python3 $S/prof_v.py "$@" > $OUT/prof_$n.txt 2>&1
  echo "$n ($e) rc $?: $(grep -E 'engine.step|plan' $OUT/prof_$n.txt | head -2 | tr '\n' ' ')" | tee -a $L
}
for ctx in 8192 32768; do for i in 1 2; do
  run old_${ctx}_$i "V_CFG=512,2,1" --shape llama-8b:q4_k_m --ctx $ctx --steps 100 --kv-cache-memory 16GiB
  run new_${ctx}_$i "X=1" --shape llama-8b:q4_k_m --ctx $ctx --steps 100 --kv-cache-memory 16GiB
done; done
(cd $OUT && tar czf prof.tgz prof_*.txt && rm -f prof_*.txt)
echo "call 5 done at $(( $(date +%s) - T0 )) s" | tee -a $L
