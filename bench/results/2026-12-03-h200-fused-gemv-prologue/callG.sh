#!/usr/bin/env bash
# Fused one-token GEMVs (RMSNorm / SiLU-and-mul into the dense and fp8 GEMV): CUDA check, GPU tests, decode A/B.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callG.log; P=$OUT/prof.txt
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 60 python3 .devbench/s39/fused_check.py 2>&1 | tee -a $L
pd() { echo "== $*" >> $P; env $1 timeout 60 python3 -m kvspill.bench.profile_decode "${@:2}" >> $P 2>&1; echo "$1 ${*:2} rc $?: $(grep engine.step $P | tail -1)" | tee -a $L; }
for shape in llama-1b llama-8b llama-8b:fp8; do
  for f in 0 1; do pd KVSPILL_FUSED_GEMV=$f --shape $shape --ctx 8192 --steps 100 --kv-cache-memory 8GiB; done
done
echo "profiles done at $(( $(date +%s) - T0 )) s" | tee -a $L
KVSPILL_PDL=0 timeout 60 python3 -m kvspill.bench.profile_decode --shape llama-1b --ctx 8192 --steps 30 --kernels 10 --kv-cache-memory 8GiB > $OUT/w1_kernels.txt 2>&1
echo "w1 kernel table rc $?" | tee -a $L
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py > $OUT/tests.log 2>&1; echo "test_gpu rc $?: $(tail -1 $OUT/tests.log)" | tee -a $L
echo "call G done at $(( $(date +%s) - T0 )) s" | tee -a $L
