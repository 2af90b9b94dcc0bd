#!/usr/bin/env bash
# Call 3: unmasked loads where the K steps / row tiles are whole (EVEN_K / EVEN_N): GPU tests, kernels, engine alternated.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s47; L=$OUT/call3.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 100 python3 -m pytest -q -p no:cacheprovider -x tests/kernels/test_gguf_int16x.py tests/kernels/test_gguf_mma.py > $OUT/tests.log 2>&1; echo "tests rc $?" | tee -a $L; tail -3 $OUT/tests.log | tee -a $L
timeout 150 python3 $S/even_sweep.py $OUT 2>&1 | grep -v Warn | tee -a $L
echo "sweep done at $(( $(date +%s) - T0 )) s" | tee -a $L
run() {  # name even args...
  local n=$1 e=$2; shift 2
  [ $(( $(date +%s) - T0 )) -lt 555 ] || { echo "skip $n e$e"; return; }
  KVSPILL_EVEN_K=$e timeout 45 python3 -m kvspill.bench.profile_decode "$@" > $OUT/prof_${n}_e$e.txt 2>&1
  echo "$n even=$e rc $?: $(grep engine.step $OUT/prof_${n}_e$e.txt)" | tee -a $L
}
for i in 1 2; do for e in 0 1; do
  run 8k_$i $e --shape llama-8b:q4_k_m --ctx 8192 --steps 100 --kv-cache-memory 8GiB
  run c8_$i $e --shape llama-8b:q4_k_m --ctx 2048 --concurrency 8 --steps 100 --kv-cache-memory 12GiB
done; done
for e in 0 1; do run c32 $e --shape llama-8b:q4_k_m --ctx 2048 --concurrency 32 --steps 100 --kv-cache-memory 12GiB; done
(cd $OUT && tar czf prof.tgz prof_*.txt && rm -f prof_*.txt)
echo "call 3 done at $(( $(date +%s) - T0 )) s" | tee -a $L
