#!/usr/bin/env bash
# Call A (carry .whl .devbench .peer): llama.cpp builds and writes the f16 8B file in the background while the GPU
# runs the fused-SiLU tests and the batch-1 A/B (KVSPILL_FUSED_SILU=0 / 1); then llama-quantize. Leaves the machine warm for callB.sh.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s45; L=$OUT/callA.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
( SHAPE=8b PEER=.peer bash $S/llamacpp_peer.sh model > $OUT/model.log 2>&1 ) &
MPID=$!
( PEER=.peer bash $S/llamacpp_peer.sh build > $OUT/build.log 2>&1; echo "build done at $(( $(date +%s) - T0 )) s" >> $OUT/build.log
  while ! grep -q "l8b.gguf" $OUT/model.log 2>/dev/null; do sleep 2; done
  /tmp/lcpp-build/bin/llama-quantize /tmp/l8b.gguf /tmp/l8b-Q4_K_M.part Q4_K_M 16 > /tmp/quant.log 2>&1 && mv /tmp/l8b-Q4_K_M.part /tmp/l8b-Q4_K_M.gguf
  echo "quantize done at $(( $(date +%s) - T0 )) s: $(tail -1 /tmp/quant.log)" >> $OUT/build.log ) &
BPID=$!
timeout 120 python3 -m pytest -q -x tests/kernels/test_gated_gemv.py "tests/engine/test_gpu.py::test_fused_silu_gate_up_gives_the_two_launch_tokens_and_logprobs" > $OUT/tests.log 2>&1; echo "tests rc $? $(tail -1 $OUT/tests.log)" | tee -a $L
P="python3 -m kvspill.bench.profile_decode --ctx 8192 --steps 100 --kv-cache-memory 8GiB"
for r in 1 2; do
  for s in llama-1b llama-8b:q4_k_m llama-8b:fp8 llama-8b; do
    [ $r = 2 ] && [ $s = llama-8b ] && continue
    [ $r = 2 ] && [ $s = llama-8b:fp8 ] && continue
    for f in 0 1; do
      KVSPILL_FUSED_SILU=$f timeout 70 $P --shape $s > $OUT/p_${s}_f${f}_$r.txt 2>&1
      echo "$s fused=$f r$r: $(grep engine.step $OUT/p_${s}_f${f}_$r.txt)" | tee -a $L
    done
  done
done
for f in 1 0; do
  [ $(( $(date +%s) - T0 )) -lt 480 ] && KVSPILL_FUSED_SILU=$f KVSPILL_PDL=0 timeout 60 $P --shape llama-8b:q4_k_m --kernels 20 > $OUT/k_q4km_f$f.txt 2>&1
done
echo "gpu done at $(( $(date +%s) - T0 )) s" | tee -a $L
while kill -0 $BPID 2>/dev/null && [ $(( $(date +%s) - T0 )) -lt 585 ]; do sleep 2; done
tail -4 $OUT/build.log | tee -a $L; tail -2 $OUT/model.log | tee -a $L
ls -la /tmp/l8b* | tee -a $L
echo "call A done at $(( $(date +%s) - T0 )) s" | tee -a $L
