#!/usr/bin/env bash
# Call D: the fused path with the halves joined (exact rounding) and the barrier in the new key's
# split only: the kernel tests on the GPU, greedy tokens off / on, and the A/B rows again.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=bench/results/2026-12-04-h200-rope-in-decode/scripts; L=$OUT/callD.log
{ date -u; git log --oneline | head -1; git status --short | head -8; } | tee -a $L
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_attention.py tests/kernels/test_rope_store.py > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
for f in 0 1; do KVSPILL_FUSED_ROPE_DECODE=$f timeout 100 python3 $S/tokens.py random:llama-8b:q4_k_m > $OUT/tok_f$f.txt 2>&1; echo "tok f$f rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L; done
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
run() {  # run NAME FUSED LIMIT ARGS...
  local name=$1 f=$2 lim=$3; shift 3
  [ $(( $(date +%s) - T0 )) -lt 520 ] || { echo "skip $name f$f (time)" | tee -a $L; return; }
  KVSPILL_FUSED_ROPE_DECODE=$f timeout $lim "$@" > $OUT/${name}_f$f.txt 2>&1
  echo "$name f$f rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/${name}_f$f.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
}
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB"
for r in 1 2; do for f in 0 1; do run p8k_r$r $f 60 $P $A --ctx 8192; done; done
for r in 1 2; do for f in 0 1; do run w1_r$r $f 45 $P --shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192; done; done
for f in 0 1; do run p32k $f 60 $P $A --ctx 32768; done
for f in 0 1; do run p8x2k $f 50 $P --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency 8; done
for f in 0 1; do run w3 $f 60 $P --shape llama-8b --steps 60 --kv-cache-memory 8GiB --ctx 32768; done
(cd $OUT && tar czf allD.tgz *.txt && rm -f *.txt)
echo "call D done at $(( $(date +%s) - T0 )) s" | tee -a $L
