#!/usr/bin/env bash
# The 8-token Q4_K_M step shape by shape (mma block_n x split_k), the engine's 8 x 2K step with the
# per-shape picks beside today's, then the GPU tests at HEAD (conftest hygiene: test_gpu + mixed graphs).
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callC.log; P=$OUT/profC.txt
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 230 python3 .devbench/s40/mma_shapes.py $OUT/mma_shapes8.json 8 > $OUT/mma_shapes.log 2>&1; echo "mma_shapes rc $?: $(tail -1 $OUT/mma_shapes.log)" | tee -a $L
pd() { echo "== $*" >> $P; timeout 80 python3 "$@" >> $P 2>&1; echo "${*: -8} rc $?: $(grep -E 'mma picks|engine.step' $P | tail -1)" | tee -a $L; }
A="kvspill.bench.profile_decode --shape llama-8b:q4_k_m --ctx 2048 --concurrency 8 --steps 100 --kv-cache-memory 8GiB"
if [ -f $OUT/mma_shapes8.json ]; then
  pd -m $A; pd .devbench/s41/with_mma_picks.py $OUT/mma_shapes8.json $A; pd -m $A
fi
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py tests/runner/test_mixed_graphs.py tests/kernels/test_pdl.py > $OUT/testsC.log 2>&1; echo "tests rc $?: $(tail -1 $OUT/testsC.log)" | tee -a $L
echo "call C done at $(( $(date +%s) - T0 )) s" | tee -a $L
