#!/usr/bin/env bash
# Call 4: one-token GEMVs prefetching all of a program's rows before the PDL wait; Q6_K v one row a program; engine A/B.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s47; L=$OUT/call4.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 150 python3 $S/pf_full_sweep.py $OUT 2>&1 | grep -v Warn | tee -a $L
C=$(cat $OUT/best_cap.txt 2>/dev/null || echo 256); [ "$C" = 0 ] && C=256
echo "sweep done at $(( $(date +%s) - T0 )) s; engine with cap $C" | tee -a $L
run() {  # name env args...
  local n=$1 e=$2; shift 2
  [ $(( $(date +%s) - T0 )) -lt 300 ] || { echo "skip $n"; return; }
  env $e timeout 45 python3 $S/prof_v.py "$@" > $OUT/prof_$n.txt 2>&1
  echo "$n ($e) rc $?: $(grep engine.step $OUT/prof_$n.txt)" | tee -a $L
}
A="--shape llama-8b:q4_k_m --ctx 8192 --steps 100 --kv-cache-memory 8GiB"
for i in 1 2; do
  run base_$i "KVSPILL_FULL_PREFETCH=0" $A
  run pf_$i "KVSPILL_FULL_PREFETCH=$C" $A
  run v_$i "V_CFG=1024,1,1" $A
done
(cd $OUT && tar czf prof.tgz prof_*.txt && rm -f prof_*.txt)
echo "call 4 done at $(( $(date +%s) - T0 )) s" | tee -a $L
