set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
date -u; python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
timeout 200 python3 .devbench/s35/kernel_check.py 2>&1 | grep -v Warn | tee $OUT/kernel_check.txt | tail -20
date -u
for q in "" fp8; do
  for m in 1 0; do
    KVSPILL_FUSED_PROLOGUE=$m timeout 120 python3 .devbench/s35/prologue_check.py $q /tmp/l_${q}_$m.pt 2>&1 | grep -v Warn | tail -3
  done
  python3 .devbench/s35/prologue_check.py --diff /tmp/l_${q}_1.pt /tmp/l_${q}_0.pt
done
date -u
