#!/usr/bin/env bash
# Call 3 (carry .whl .devbench .peer): llama.cpp builds (-j12) and writes the Q4_K_M file while the GPU runs
# the words-form tests and the engine's batched rows, old table (file) against the new one. Leaves the machine warm for call4.sh.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s44; L=$OUT/call3.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
sed -i 's/-j16 --target/-j12 --target/' $S/llamacpp_peer.sh
( PEER=.peer bash $S/llamacpp_peer.sh build > $OUT/build.log 2>&1; echo "build done at $(( $(date +%s) - T0 )) s" >> $OUT/build.log ) &
BPID=$!
( SHAPE=8b PEER=.peer bash $S/llamacpp_peer.sh model > $OUT/model.log 2>&1 ) &
MPID=$!
timeout 120 python3 -m pytest -q -x tests/kernels/test_gguf_mma.py -k "words or tuned or forms" > $OUT/tests.log 2>&1; echo "tests rc $? $(tail -1 $OUT/tests.log)" | tee -a $L
P="python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --ctx 2048 --steps 100"
for r in 1 2; do
  for c in 8 32 16; do
    [ $r = 2 ] && [ $c != 8 ] && continue
    M=8GiB; [ $c = 32 ] && M=12GiB
    KVSPILL_MMA_CONFIGS=$S/old_table.json timeout 60 $P --concurrency $c --kv-cache-memory $M > $OUT/p_old_c${c}_$r.txt 2>&1
    echo "old c$c r$r: $(grep engine.step $OUT/p_old_c${c}_$r.txt)" | tee -a $L
    timeout 60 $P --concurrency $c --kv-cache-memory $M > $OUT/p_new_c${c}_$r.txt 2>&1
    echo "new c$c r$r: $(grep engine.step $OUT/p_new_c${c}_$r.txt)" | tee -a $L
  done
done
timeout 60 $P --concurrency 1 --kv-cache-memory 8GiB > $OUT/p_new_c1.txt 2>&1; echo "new c1: $(grep engine.step $OUT/p_new_c1.txt)" | tee -a $L
echo "gpu done at $(( $(date +%s) - T0 )) s" | tee -a $L
wait $BPID; tail -3 $OUT/build.log | tee -a $L; wait $MPID; tail -2 $OUT/model.log | tee -a $L
if [ ! -f /tmp/l8b-Q4_K_M.gguf ]; then
  timeout $(( 590 - ($(date +%s) - T0) )) /tmp/lcpp-build/bin/llama-quantize /tmp/l8b.gguf /tmp/l8b-Q4_K_M.part Q4_K_M 16 > /tmp/quant.log 2>&1 \
    && mv /tmp/l8b-Q4_K_M.part /tmp/l8b-Q4_K_M.gguf
  tail -1 /tmp/quant.log | tee -a $L
fi
ls -la /tmp/l8b* | tee -a $L
(cd $OUT && tar czf prof3.tgz p_*.txt && rm -f p_*.txt)
echo "call 3 done at $(( $(date +%s) - T0 )) s" | tee -a $L
