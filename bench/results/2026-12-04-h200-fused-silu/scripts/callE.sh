#!/usr/bin/env bash
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callE.log; date -u | tee $L
timeout 100 python3 .devbench/s45/mlp_ab.py q4k q4k_q6down > $OUT/mlp_early.txt 2>&1; grep -E "^(q4k|bf16|fp8)" $OUT/mlp_early.txt | tee -a $L
KVSPILL_GATED_LATE=1 timeout 150 python3 .devbench/s45/mlp_ab.py q4k q4k_q6down bf16 fp8 > $OUT/mlp_late.txt 2>&1; grep -E "^(q4k|bf16|fp8)" $OUT/mlp_late.txt | sed 's/^/late /' | tee -a $L
echo "mlp done at $(( $(date +%s) - T0 )) s" | tee -a $L
P="python3 -m kvspill.bench.profile_decode --ctx 8192 --steps 100 --kv-cache-memory 8GiB"
for s in llama-8b:q4_k_m llama-8b llama-1b llama-8b:fp8; do
  for v in f0 f1 late; do
    case $v in f0) E="KVSPILL_FUSED_SILU=0";; f1) E="KVSPILL_FUSED_SILU=1";; late) E="KVSPILL_FUSED_SILU=1 KVSPILL_GATED_LATE=1";; esac
    [ $(( $(date +%s) - T0 )) -lt 540 ] || break 2
    env $E timeout 60 $P --shape $s > $OUT/e.txt 2>&1
    echo "$s $v: $(grep engine.step $OUT/e.txt)" | tee -a $L
  done
done
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
