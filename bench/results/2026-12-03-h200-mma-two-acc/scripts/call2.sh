#!/usr/bin/env bash
# Call 2: words-form mma with two accumulator chains; Q4_K gate_up split 2 at 17-32 tokens.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s44; L=$OUT/call2.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
KVSPILL_MMA_TWO_ACC=1 timeout 150 python3 -m pytest -q -x tests/kernels/test_gguf_mma.py -k "words" > $OUT/tests.log 2>&1; echo "tests rc $? $(tail -1 $OUT/tests.log)" | tee -a $L
timeout 200 python3 $S/acc_ab.py $OUT/acc_ab.json 8 32 > $OUT/acc_ab.log 2>&1; echo "acc_ab rc $?" | tee -a $L; tail -2 $OUT/acc_ab.log | tee -a $L
echo "at $(( $(date +%s) - T0 )) s" | tee -a $L
echo '{"Q4_K,32": {"block_n": 64, "num_warps": 4, "split_k": 8, "num_stages": 3, "words": true, "sb_per_split": 4}}' > /tmp/old32.json
P="python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --ctx 2048 --steps 100"
for r in 1 2; do
  CS="8 32"; [ $r = 2 ] && CS=8
  for c in $CS; do
    M=8GiB; [ $c = 32 ] && M=12GiB
    KVSPILL_MMA_CONFIGS=/tmp/old32.json KVSPILL_MMA_TWO_ACC=0 timeout 60 $P --concurrency $c --kv-cache-memory $M > $OUT/p_base_c${c}_$r.txt 2>&1
    echo "base c$c r$r: $(grep engine.step $OUT/p_base_c${c}_$r.txt)" | tee -a $L
    KVSPILL_MMA_TWO_ACC=0 timeout 60 $P --concurrency $c --kv-cache-memory $M > $OUT/p_wide_c${c}_$r.txt 2>&1
    echo "wide c$c r$r: $(grep engine.step $OUT/p_wide_c${c}_$r.txt)" | tee -a $L
    KVSPILL_MMA_TWO_ACC=1 timeout 60 $P --concurrency $c --kv-cache-memory $M > $OUT/p_two_c${c}_$r.txt 2>&1
    echo "wide+two c$c r$r: $(grep engine.step $OUT/p_two_c${c}_$r.txt)" | tee -a $L
  done
  [ $(( $(date +%s) - T0 )) -gt 400 ] && break
done
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
