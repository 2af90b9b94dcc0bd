#!/usr/bin/env bash
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callD.log; date -u | tee $L
timeout 200 python3 .devbench/s45/mlp_ab.py 2>&1 | tee $OUT/mlp_ab.txt | tail -40 >> $L
echo "mlp done at $(( $(date +%s) - T0 )) s" | tee -a $L
for f in 0 1; do
  KVSPILL_FUSED_SILU=$f timeout 90 python3 -m kvspill.bench.profile_decode --shape llama-8b --ctx 8192 --steps 60 --kv-cache-memory 8GiB --kernels 10 > $OUT/k_bf16_f$f.txt 2>&1
  echo "bf16 f$f: $(grep engine.step $OUT/k_bf16_f$f.txt)" | tee -a $L
done
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
