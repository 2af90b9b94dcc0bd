#!/usr/bin/env bash
# Call A: the Q4_K scale pairs (kernels/gguf_mma_words.pack_scales, attached at load for batched
# steps) on the GPU: their kernel tests (bit-equal to the header's scales), then the engine's
# Q4_K_M rows with the pairs and with KVSPILL_SCALE_PAIRS=0, alternated, on one machine.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callA.log
{ date -u; git log --oneline | head -1; git status --short | head -12; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_mma.py -k "pairs or pack_scales or half_activations" tests/model/test_random_q4km.py > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
P="python3 -m kvspill.bench.profile_decode"
run() {  # run NAME LIMIT ARGS...
  local name=$1 lim=$2; shift 2
  [ $(( $(date +%s) - T0 )) -lt 540 ] || { echo "skip $name (time)" | tee -a $L; return; }
  timeout $lim "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan |floor|scale pairs' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $L
}
Q="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048"
run q8x2k_pairs 50 $P $Q --concurrency 8
run q8x2k_off 50 env KVSPILL_SCALE_PAIRS=0 $P $Q --concurrency 8
run q1x2k 50 $P $Q
run q32x2k_pairs 60 $P $Q --concurrency 32
run q16x2k_pairs 55 $P $Q --concurrency 16
run q4x2k_pairs 50 $P $Q --concurrency 4
run q8x2k_pairs2 50 $P $Q --concurrency 8
run q8x2k_off2 50 env KVSPILL_SCALE_PAIRS=0 $P $Q --concurrency 8
run q32x2k_off 60 env KVSPILL_SCALE_PAIRS=0 $P $Q --concurrency 32
(cd $OUT && tar czf allA.tgz *.txt && rm -f *.txt)
echo "call A done at $(( $(date +%s) - T0 )) s" | tee -a $L
