#!/usr/bin/env bash
# Fused-norm prototype: 8B Q4_K_M 8K batch 1, unfused vs fused (alternated), then greedy tokens on the 1B Q4_K_M shape.
set -u
T0=$(date +%s)
[ -d /tmp/site/gguf ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=bench/results/2026-12-04-h200-fused-norm-tried/scripts; L=$OUT/callF.log
{ date -u; git log --oneline | head -1; git status --short | head -5; } | tee -a $L
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192"
for r in 1 2; do for v in 0 1; do
  [ $(( $(date +%s) - T0 )) -lt 170 ] || break 2
  FUSE=$v timeout 80 python3 $S/prof_fused.py $A > $OUT/p_f${v}_$r.txt 2>&1
  echo "fuse=$v r$r rc $?: $(grep -E 'fused norm|engine.step|plan ' $OUT/p_f${v}_$r.txt | tr '\n' ' ')" | tee -a $L
done; done
for v in 0 1; do
  [ $(( $(date +%s) - T0 )) -lt 230 ] || break
  FUSE=$v timeout 40 python3 $S/tokens_fused.py random:llama-1b:q4_k_m > $OUT/tok_f$v.txt 2>&1; echo "tokens fuse=$v rc $?" | tee -a $L
done
python3 -c "
import json
try:
    a, b = (json.loads(open('$OUT/tok_f%d.txt' % v).read().strip().splitlines()[-1]) for v in (0, 1))
    for x, y in zip(a, b):
        same = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), len(x))
        print('tokens equal for', same, 'of', len(x))
except Exception as e:
    print('token compare failed', e)
" | tee -a $L
(cd $OUT && tar czf all.tgz p_*.txt tok_*.txt 2>/dev/null && rm -f p_*.txt tok_*.txt)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
