#!/usr/bin/env bash
# Call C (warm machine): greedy tokens on the file with the fused path off / on, the 8K kernel table, W1 A/B.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=bench/results/2026-12-04-h200-rope-in-decode/scripts; L=$OUT/callC.log; F=/tmp/l8b-Q4_K_M.gguf
{ date -u; git log --oneline | head -1; ls -la $F; } | tee -a $L
for f in 0 1; do KVSPILL_FUSED_ROPE_DECODE=$f timeout 170 python3 $S/tokens.py $F > $OUT/tok_f$f.txt 2>&1; echo "tok f$f rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L; done
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
P="python3 -m kvspill.bench.profile_decode"
[ $(( $(date +%s) - T0 )) -lt 420 ] && KVSPILL_PDL=0 timeout 90 $P --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192 --kernels 20 > $OUT/k8k_f1.txt 2>&1
for f in 0 1 0 1; do
  [ $(( $(date +%s) - T0 )) -lt 500 ] || break
  KVSPILL_FUSED_ROPE_DECODE=$f timeout 45 $P --shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192 > $OUT/w1_f$f.txt 2>&1
  echo "w1 f$f rc $?: $(grep -E 'engine.step|plan ' $OUT/w1_f$f.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
done
(cd $OUT && tar czf allC.tgz *.txt && rm -f *.txt)
echo "call C done at $(( $(date +%s) - T0 )) s" | tee -a $L
