#!/usr/bin/env bash
# Call 1: decode attention's split count at 32 and 8 x 2K in the engine (fixed_splits.diff:
# KVSPILL_ATTN_SPLITS=N overrides choose_num_splits; unset = today's 3 / 9), the landed early reads
# on the H200 (KVSPILL_EARLY_READS=1 default vs 0, alternated) at 8K / 32K / W1 / fp8 / bf16,
# attention alone over num_splits x launch configs (attn_splits.py), the GPU tests of the early reads.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call1
N=bench/results/2026-12-05-h200-attn-splits/scripts
git apply $N/fixed_splits.diff && echo "fixed_splits.diff applied" | tee -a $L
B="--shape llama-8b:q4_k_m --steps 100"
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
run() {  # name, limit, env..., -- profile_decode args
  local name=$1 lim=$2; shift 2; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
  timeout 100 env "${envs[@]}" python3 -m kvspill.bench.profile_decode "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step' $OUT/$name.txt | tr -s ' ')" | tee -a $L
}
C32="$B --kv-cache-memory 16GiB --ctx 2048 --concurrency 32"
C8="$B --kv-cache-memory 12GiB --ctx 2048 --concurrency 8"
run c32_today_a 150 X=1 -- $C32
for s in 2 4 6; do run c32_s${s} 200 KVSPILL_ATTN_SPLITS=$s -- $C32; done
run c32_today_b 220 X=1 -- $C32
run c8_today_a 240 X=1 -- $C8
run c8_s8 260 KVSPILL_ATTN_SPLITS=8 -- $C8
run c8_s4 270 KVSPILL_ATTN_SPLITS=4 -- $C8
run c8_today_b 290 X=1 -- $C8
for r in a b; do
  run 8k_on_$r 330 X=1 -- $B --kv-cache-memory 16GiB --ctx 8192
  run 8k_off_$r 330 KVSPILL_EARLY_READS=0 -- $B --kv-cache-memory 16GiB --ctx 8192
done
left 400 && { timeout 100 python3 $N/../../2026-12-05-h200-q6k-split/scripts/attn_splits.py $OUT/attn_splits.json > $OUT/attn_splits.txt 2>&1; echo "attn_splits rc $? at $(( $(date +%s) - T0 )) s:"; cat $OUT/attn_splits.txt; } | tee -a $L
run w1_on 430 X=1 -- --shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192
run w1_off 440 KVSPILL_EARLY_READS=0 -- --shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192
run fp8_on 460 X=1 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
run bf16_on 480 X=1 -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
run 32k_on 500 X=1 -- $B --kv-cache-memory 16GiB --ctx 32768
run 32k_off 510 KVSPILL_EARLY_READS=0 -- $B --kv-cache-memory 16GiB --ctx 32768
left 520 && { timeout 70 python3 -m pytest -q -x tests/kernels/test_decode_attention.py tests/kernels/test_pdl.py tests/runner/test_attention_rope_decode.py > $OUT/pytest.txt 2>&1; echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L; }
git checkout -q kvspill
(cd $OUT && tar czf all1.tgz *.txt && rm -f *.txt)
echo "call 1 done at $(( $(date +%s) - T0 )) s" | tee -a $L
