#!/usr/bin/env bash
# Greedy tokens before / after (Q4_K_M: 7a290d1 vs HEAD, the q+k merge; fp8: old vs new tiles) and
# decode attention's programs per SM (4, the default, vs 8) at batch 1 8K and 8 x 2K.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1
L=$OUT/callJ.log; P=$OUT/prof.txt; S=$PWD/.devbench/s39; ROOT=$PWD
{ date -u; git log --oneline | head -1; git status --short | head -5; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
g() { (cd $1 && PYTHONPATH=/tmp/site:$PWD timeout 75 python3 $S/greedy.py "${@:2}" >> $OUT/greedy.log 2>&1); echo "greedy $* rc $?" | tee -a $L; }
g .devbench/old7a2 llama-8b:q4_k_m $OUT/q4km_old.json
g . llama-8b:q4_k_m $OUT/q4km_new.json
g . llama-8b:fp8 $OUT/fp8_old.json old-fp8-tiles
g . llama-8b:fp8 $OUT/fp8_new.json
python3 - <<PY | tee -a $L
import json
for a, b in (("q4km_old", "q4km_new"), ("fp8_old", "fp8_new")):
    try:
        x, y = json.load(open("$OUT/%s.json" % a)), json.load(open("$OUT/%s.json" % b))
    except OSError as e:
        print(a, b, "missing", e); continue
    for k in sorted(x):
        same = next((i for i, (p, q) in enumerate(zip(x[k], y[k])) if p != q), len(x[k]))
        print(a, "vs", b, "request", k, "tokens", len(x[k]), len(y[k]), "equal" if x[k] == y[k] else "first difference at %d" % same)
PY
echo "greedy done at $(( $(date +%s) - T0 )) s" | tee -a $L
export PYTHONPATH=/tmp/site:$PWD
pd() { echo "== $*" >> $P; timeout 60 python3 $S/pps.py "$@" >> $P 2>&1; echo "pps $1 ${*:3} rc $?: $(grep engine.step $P | tail -1)" | tee -a $L; }
for args in "--shape llama-8b:q4_k_m --ctx 8192" "--shape llama-8b:q4_k_m --ctx 2048 --concurrency 8"; do
  for n in 4 8; do pd $n kvspill.bench.profile_decode $args --steps 100 --kv-cache-memory 8GiB; done
done
echo "call J done at $(( $(date +%s) - T0 )) s" | tee -a $L
