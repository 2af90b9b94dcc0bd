#!/usr/bin/env bash
# GPU tests of the int16-x kernels; Q6_K int16-x sweep; engine 8K / 32K random Q4_K_M:
# int16 off, Q4_K int16 (per-shape table), + Q6_K int16 at the sweep's best. Writes /tmp/q6_cfg if Q6 wins both.
set -u
T0=$(date +%s)
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s38; L=$OUT/callE.log
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_int16x.py tests/kernels/test_gguf_gemv.py > $OUT/tests.log 2>&1; echo "tests rc $?: $(tail -1 $OUT/tests.log)" | tee -a $L
timeout 150 python3 $S/q6_sweep.py $OUT 2>&1 | tail -7 | tee -a $L
BEST=$(python3 -c "
import json,collections
t=collections.defaultdict(float); n=collections.Counter()
for l in open('$OUT/q6_int16x.jsonl'):
    d=json.loads(l)
    if d['cfg'] and 'us' in d: t[tuple(d['cfg'])]+=d['us']; n[tuple(d['cfg'])]+=1
m=max(n.values()); b=min((k for k in t if n[k]==m), key=t.get); print(','.join(map(str,b)))")
echo "q6 best $BEST at $(( $(date +%s) - T0 )) s" | tee -a $L
for ctx in 8192 32768; do
  for mode in off q4 q4q6; do
    case $mode in off) E="KVSPILL_INT16_X=0";; q4) E="KVSPILL_INT16_X=1";; q4q6) E="KVSPILL_INT16_X=1 Q6_CFG=$BEST";; esac
    env $E timeout 70 python3 $S/with_q6.py kvspill.bench.profile_decode --shape llama-8b:q4_k_m --ctx $ctx --steps 100 --kv-cache-memory 8GiB > $OUT/prof${ctx}_$mode.txt 2>&1
    echo "ctx $ctx $mode rc $?: $(grep engine.step $OUT/prof${ctx}_$mode.txt)" | tee -a $L
  done
done
python3 - "$BEST" <<'PY' | tee -a $L
import os, re, sys
def ms(ctx, mode):
    m = re.search(r"engine.step\s+([\d.]+) ms", open(f"{os.environ['OUT']}/prof{ctx}_{mode}.txt").read())
    return float(m.group(1)) if m else None
r = {c: (ms(c, "q4"), ms(c, "q4q6")) for c in (8192, 32768)}
win = all(a and b and b < a * 0.995 for a, b in r.values())
print("q6 decision", r, "win" if win else "no")
if win:
    open("/tmp/q6_cfg", "w").write(sys.argv[1])
PY
echo "call E done at $(( $(date +%s) - T0 )) s" | tee -a $L
