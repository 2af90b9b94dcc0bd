#!/usr/bin/env bash
# Call A: decode attention's K/V asked of L2 before the PDL wait (KVSPILL_KV_PREFETCH keys a split,
# 0 = today) and the programs an SM that set num_splits (KVSPILL_ATTN_PPS, 4 = today), in the
# engine (random llama-8b:q4_k_m, alternated; fp8, 8 x 2K, 32 x 2K, W1 on and off), cos/sin read before the wait (KVSPILL_ROPE_EARLY=1); the 8K step's kernel
# table with PDL off; RMSNorm's weight and residual read before the wait (KVSPILL_NORM_EARLY=1) (each kernel's own time).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh callA
N=bench/results/2026-12-05-h100-early-reads/scripts
B="--shape llama-8b:q4_k_m --steps 100"
ALL="KVSPILL_KV_PREFETCH=64 KVSPILL_ROPE_EARLY=1 KVSPILL_NORM_EARLY=1"
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
run() {  # name, limit, env..., -- profile_decode args
  local name=$1 lim=$2; shift 2; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
  timeout 90 env "${envs[@]}" python3 -m kvspill.bench.profile_decode "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step' $OUT/$name.txt | tr -s ' ')" | tee -a $L
}
timeout 90 python3 $N/q6k_prex.py A >> $OUT/q6k_prex.jsonl 2>&1; echo "q6k_prex rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/q6k_prex.jsonl)" | tee -a $L
for r in a b; do
  run 8k_pf0_$r 200 KVSPILL_KV_PREFETCH=0 -- $B --kv-cache-memory 16GiB --ctx 8192
  [ $r = a ] && run 8k_pf64_$r 200 KVSPILL_KV_PREFETCH=64 -- $B --kv-cache-memory 16GiB --ctx 8192
  [ $r = a ] && run 8k_early_$r 200 KVSPILL_ROPE_EARLY=1 -- $B --kv-cache-memory 16GiB --ctx 8192
  [ $r = a ] && run 8k_norm_$r 200 KVSPILL_NORM_EARLY=1 -- $B --kv-cache-memory 16GiB --ctx 8192
  run 8k_all_$r 200 $ALL -- $B --kv-cache-memory 16GiB --ctx 8192
done
left 230 && { timeout 60 env $ALL python3 -m pytest -q -x tests/kernels/test_decode_attention.py tests/runner/test_attention_rope_decode.py tests/kernels/test_fused_ops.py > $OUT/pytest.txt 2>&1; echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L; }
run w1_pf0 300 KVSPILL_KV_PREFETCH=0 -- --shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192
run w1_all 300 $ALL -- --shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192
run c32_pf0 330 KVSPILL_KV_PREFETCH=0 -- $B --kv-cache-memory 16GiB --ctx 2048 --concurrency 32
run c32_all 330 $ALL -- $B --kv-cache-memory 16GiB --ctx 2048 --concurrency 32
run fp8_pf0 360 KVSPILL_KV_PREFETCH=0 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
run fp8_all 360 $ALL -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
run 32k_pf0 385 KVSPILL_KV_PREFETCH=0 -- $B --kv-cache-memory 16GiB --ctx 32768
run 32k_all 385 $ALL -- $B --kv-cache-memory 16GiB --ctx 32768
run k8k_pdl_off 410 KVSPILL_PDL=0 -- $B --kv-cache-memory 16GiB --ctx 8192 --kernels 5
(cd $OUT && tar czf allA.tgz *.txt && rm -f *.txt)
echo "call A done at $(( $(date +%s) - T0 )) s" | tee -a $L
