#!/usr/bin/env bash
# The call that decides two defaults (not run yet: written 2026-12-05 with no device time left):
# 1. Q5_K at 4-32 tokens in gguf_mma's sub-block form against today's dot kernel (kernels alone,
#    then the engine at 8 x 2K with a tuned-configs file against without);
# 2. Q4_1 (AWQ / GPTQ) one-token int16-x lanes (KVSPILL_Q41_INT16X=1) against the generic kernel
#    (kernels alone, then random llama-8b:q4_1 at 8K); the kernel tests on the card first.
# Run from the repository root with the wheels on the path (the prelude of 2026-12-04-h200-scale-pairs).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh next_call
N=bench/results/2026-12-05-q5k-mma/scripts
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_gguf_int16x.py tests/kernels/test_gguf_mma.py -k "q5k or Q5_K or q41" > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
for t in 8 4 16 32; do timeout 60 python3 $N/q5k_mma.py $t | tee -a $OUT/q5k_mma.jsonl; done
K="python3 -m kvspill.bench.kernels_gguf --types Q4_1 --tokens 1 --shapes qkv o gate_up down"
timeout 60 env KVSPILL_Q41_INT16X=1 $K 2>&1 | tee $OUT/q41_int16x.txt
timeout 60 $K 2>&1 | tee $OUT/q41_generic.txt
P="python3 -m kvspill.bench.profile_decode --steps 100"
echo '{"Q5_K,8": {"block_n": 32, "num_warps": 2, "split_k": 4, "num_stages": 3, "magic": true}}' > /tmp/q5k_mma.json
for r in a b; do
  timeout 90 env KVSPILL_MMA_CONFIGS=/tmp/q5k_mma.json $P --shape llama-8b:q5_k --kv-cache-memory 12GiB --ctx 2048 --concurrency 8 > $OUT/c8_mma_$r.txt 2>&1
  timeout 90 $P --shape llama-8b:q5_k --kv-cache-memory 12GiB --ctx 2048 --concurrency 8 > $OUT/c8_dot_$r.txt 2>&1
  timeout 90 env KVSPILL_Q41_INT16X=1 $P --shape llama-8b:q4_1 --kv-cache-memory 16GiB --ctx 8192 > $OUT/q41_on_$r.txt 2>&1
  timeout 90 $P --shape llama-8b:q4_1 --kv-cache-memory 16GiB --ctx 8192 > $OUT/q41_off_$r.txt 2>&1
done
grep -H "engine.step\|plan " $OUT/*_[ab].txt | tee -a $L
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
