#!/usr/bin/env bash
# Call A: bf16c52 (the review refactor of the fused RoPE decode path) on the GPU: the kernel tests,
# then every issue-54 row kvspill can measure alone, on one machine.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/callA.log
{ date -u; git log --oneline | head -1; git status --short | head -8; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_attention.py tests/kernels/test_rope_store.py tests/runner/test_attention_rope_decode.py > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
P="python3 -m kvspill.bench.profile_decode"
run() {  # run NAME LIMIT ARGS...
  local name=$1 lim=$2; shift 2
  [ $(( $(date +%s) - T0 )) -lt 540 ] || { echo "skip $name (time)" | tee -a $L; return; }
  timeout $lim "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan |floor' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-300)" | tee -a $L
}
Q="--shape llama-8b:q4_k_m --steps 100"
run q8k 60 $P $Q --kv-cache-memory 16GiB --ctx 8192
run q32k 60 $P $Q --kv-cache-memory 16GiB --ctx 32768
run q1x2k 50 $P $Q --kv-cache-memory 12GiB --ctx 2048
run q8x2k 50 $P $Q --kv-cache-memory 12GiB --ctx 2048 --concurrency 8
run q32x2k 60 $P $Q --kv-cache-memory 12GiB --ctx 2048 --concurrency 32
run w1 45 $P --shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192
run fp8 60 $P --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
run bf16 70 $P --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
run w1_bench 60 python3 -m kvspill.bench --shape llama-1b --vram-budget 16GiB --ctx 8192 --new-tokens 64
(cd $OUT && tar czf allA.tgz *.txt && rm -f *.txt)
echo "call A done at $(( $(date +%s) - T0 )) s" | tee -a $L
