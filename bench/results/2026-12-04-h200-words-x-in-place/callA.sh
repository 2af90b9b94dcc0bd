#!/usr/bin/env bash
# Call A (carry .whl .devbench .peer): llama.cpp builds and writes the f16 8B file in the background while the GPU
# runs the words-form tests and the x-in-place A/B on random Q4_K_M; then llama-quantize. Leaves the machine warm for callB.sh.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s46; L=$OUT/callA.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
( SHAPE=8b PEER=.peer bash $S/llamacpp_peer.sh model > $OUT/model.log 2>&1 ) &
( PEER=.peer bash $S/llamacpp_peer.sh build > $OUT/build.log 2>&1; echo "build done at $(( $(date +%s) - T0 )) s" >> $OUT/build.log
  while ! grep -q "l8b.gguf" $OUT/model.log 2>/dev/null; do sleep 2; done
  /tmp/lcpp-build/bin/llama-quantize /tmp/l8b.gguf /tmp/l8b-Q4_K_M.part Q4_K_M 16 > /tmp/quant.log 2>&1 && mv /tmp/l8b-Q4_K_M.part /tmp/l8b-Q4_K_M.gguf
  echo "quantize done at $(( $(date +%s) - T0 )) s: $(tail -1 /tmp/quant.log)" >> $OUT/build.log ) &
BPID=$!
python3 $S/inplace_configs.py /tmp/inplace.json | tee -a $L
timeout 150 python3 -m pytest -q -x tests/kernels/test_gguf_mma.py -k "words or in_place or counters" > $OUT/tests.log 2>&1; echo "tests rc $? $(tail -1 $OUT/tests.log)" | tee -a $L
P="python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --ctx 2048 --steps 100 --kv-cache-memory 12GiB"
for r in 1 2; do
  for c in 8 32 16; do
    [ $r = 2 ] && [ $c = 16 ] && continue
    for v in copy inplace; do
      [ $(( $(date +%s) - T0 )) -lt 420 ] || break 3
      if [ $v = inplace ]; then E="KVSPILL_MMA_CONFIGS=/tmp/inplace.json"; else E=""; fi
      env $E timeout 60 $P --concurrency $c > $OUT/p_c${c}_${v}_$r.txt 2>&1
      echo "$v c$c r$r: $(grep engine.step $OUT/p_c${c}_${v}_$r.txt)" | tee -a $L
    done
  done
done
for v in copy inplace; do
  if [ $v = inplace ]; then E="KVSPILL_MMA_CONFIGS=/tmp/inplace.json"; else E=""; fi
  [ $(( $(date +%s) - T0 )) -lt 480 ] && env $E KVSPILL_PDL=0 timeout 50 $P --concurrency 8 --kernels 20 > $OUT/k_c8_$v.txt 2>&1
done
echo "gpu done at $(( $(date +%s) - T0 )) s" | tee -a $L
while kill -0 $BPID 2>/dev/null && [ $(( $(date +%s) - T0 )) -lt 585 ]; do sleep 2; done
tail -4 $OUT/build.log | tee -a $L; tail -2 $OUT/model.log | tee -a $L
ls -la /tmp/l8b* | tee -a $L
echo "call A done at $(( $(date +%s) - T0 )) s" | tee -a $L
