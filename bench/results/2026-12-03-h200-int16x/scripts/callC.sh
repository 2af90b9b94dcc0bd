#!/usr/bin/env bash
# int8-x Q4_K one-token kernel: GPU check against its reference, config sweep, engine 8K on/off.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s36; L=$OUT/callC.log
{ date -u; git log --oneline | head -1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_int8x.py 2>&1 | tail -3 | tee -a $L
timeout 200 python3 $S/int8x_sweep.py $OUT 2>&1 | tail -8 | tee -a $L
echo "sweep done at $(( $(date +%s) - T0 )) s" | tee -a $L
BEST=$(python3 -c "
import json,collections
t=collections.defaultdict(float); n=collections.Counter()
for l in open('$OUT/int8x.jsonl'):
    d=json.loads(l)
    if d['cfg'] and 'us' in d: t[tuple(d['cfg'])]+=d['us']; n[tuple(d['cfg'])]+=1
m=max(n.values()); b=min((k for k in t if n[k]==m), key=t.get); print(','.join(map(str,b)))")
echo "best $BEST" | tee -a $L
for on in 0 1 0 1; do
  KVSPILL_INT8_X=$on INT8X_CFG=$BEST timeout 70 python3 $S/prof_cfg.py --shape llama-8b:q4_k_m --ctx 8192 --steps 100 > $OUT/prof8k_int8x$on.txt 2>&1
  echo "int8x=$on rc $?: $(grep engine.step $OUT/prof8k_int8x$on.txt)" | tee -a $L
done
KVSPILL_PDL=0 KVSPILL_INT8_X=1 INT8X_CFG=$BEST timeout 70 python3 $S/prof_cfg.py --shape llama-8b:q4_k_m --ctx 8192 --steps 40 --kernels 12 > $OUT/prof8k_kernels.txt 2>&1
grep -E "one_token|int8x|q6k_gemv|_decode_split|engine.step" $OUT/prof8k_kernels.txt | cut -c1-60,150-240 | tee -a $L
echo "call C done at $(( $(date +%s) - T0 )) s" | tee -a $L
