#!/usr/bin/env bash
# Call F (prepared, not run): the scale pairs computed once (prepacked_scales.diff) against HEAD
# and `noscale`: the 8-token kernel per shape, alternated; its outputs against HEAD's bit for bit;
# the GPU tests of the tensor-core kernel with the diff applied. The engine does not use it yet.
set -u
T0=$(date +%s)
[ -d /tmp/site/gguf ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
S=bench/results/2026-12-04-h200-mma-dequant-cost/scripts; L=$OUT/callF.log; D=$S/prepacked_scales.diff
{ date -u; git log --oneline | head -1; } | tee -a $L
git apply --check $D || { echo "the diff does not apply" | tee -a $L; exit 1; }
for r in 1 2; do
  SAVE=$OUT/out_head.pt timeout 90 python3 $S/dequant_cost.py full 2>>$OUT/err_full.txt | tee -a $L
  timeout 90 python3 $S/dequant_cost.py noscale 2>>$OUT/err_noscale.txt | tee -a $L
  git apply $D
  SAVE=$OUT/out_prepacked.pt timeout 90 python3 $S/dequant_cost.py prepacked 2>>$OUT/err_prepacked.txt | tee -a $L
  git apply -R $D
done
python3 -c "
import torch
a, b = torch.load('$OUT/out_head.pt'), torch.load('$OUT/out_prepacked.pt')
print('bit-equal to HEAD:', {k: bool(torch.equal(a[k], b[k])) for k in a})" 2>&1 | tee -a $L
rm -f $OUT/out_*.pt
git apply $D
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_mma.py -x > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
git apply -R $D
