#!/usr/bin/env bash
# Call A: the dequantization's share of the 8-token Q4_K tensor-core kernel (dequant_cost.py, one
# process a variant so each compiles its own asm), twice over.
set -u
T0=$(date +%s)
[ -d /tmp/site/gguf ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
S=bench/results/2026-12-04-h200-mma-dequant-cost/scripts; L=$OUT/callA.log
{ date -u; which ncu nsys; ls -d /usr/local/cuda*/bin 2>&1 | head -3; git log --oneline | head -1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
for r in 1 2; do for v in ${VARIANTS:-full nosub nofma raw}; do
  timeout 90 python3 $S/dequant_cost.py $v 2>$OUT/err_$v.txt | tee -a $L
  echo "  ($v rc $? at $(( $(date +%s) - T0 )) s)" | tee -a $L
done; done
