#!/usr/bin/env bash
# Not an H200 (prepared 2026-12-07 08:05 UTC; carry .whl; about 480 s): with the handoff on by
# default for dense models (f9da9dc), the whole GPU test file on the defaults, then the handoff's
# rows again on the defaults against KVSPILL_NORM_HANDOFF=0: W1 (the bench's floor ratio) and the
# 8B bf16 at 8K, the 8B fp8 on its default (prologue norms).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh defaults
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py tests/model/test_random_q4km.py > $OUT/gpu_tests.txt 2>&1
echo "gpu tests (defaults) rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/gpu_tests.txt)" | tee -a $L
w1() {  # w1 NAME LIMIT SWITCH
  left $2 || { echo "$1 skipped (time)" | tee -a $L; return; }
  env $3 timeout 45 python3 -m kvspill.bench --shape llama-1b --vram-budget 16GiB --ctx 8192 \
    --new-tokens 64 --out $OUT/$1.jsonl > $OUT/$1.txt 2>&1
  echo "$1 rc $? at $(( $(date +%s) - T0 )) s: $(grep -oE '"(decode_tok_s|floor_ratio)": [0-9.]*' $OUT/$1.jsonl | tr '\n' ' ')" | tee -a $L
}
for r in a b; do
  w1 w1_default_$r 420 X=1
  w1 w1_h0_$r 440 KVSPILL_NORM_HANDOFF=0
  prof bf16_default_$r 470 X=1 -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
  prof bf16_h0_$r 500 KVSPILL_NORM_HANDOFF=0 -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
done
prof fp8_default 540 X=1 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
(cd $OUT && tar czf defaults.tgz *.txt && rm -f *.txt)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
