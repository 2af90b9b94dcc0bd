#!/usr/bin/env bash
# Call 14 (prepared 2026-12-05, not run): Q4_1's tensor-core sub-block form (3831874, untimed, no
# table entry) for int4 checkpoints' decode batches: its GPU tests, `mma_sweep --types Q4_1` at 4 /
# 8 / 16 / 32 tokens against the dot kernel and dequantize-then-GEMM (the paths Q4_1 takes today),
# then random 8B Q4_1 at 8 and 32 x 2K with the sweep's picks (KVSPILL_MMA_CONFIGS) against
# without, alternated. A pick that wins the engine goes into MMA_CONFIGS.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call14
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_gguf_mma.py -k "Q4_1 or q41 or tuned" > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
timeout 260 python3 -m kvspill.bench.mma_sweep --types Q4_1 --forms sub --tokens 4 8 16 32 --budget-s 220 --out $OUT/sweep 2>&1 | tail -6 | tee -a $L
if grep -q "Q4_1" $OUT/sweep/mma_configs.json 2>/dev/null; then
  for r in a b; do
    for v in picks none; do
      for c in 8 32; do
        left 570 || break 3
        cfg=; [ $v = picks ] && cfg=$OUT/sweep/mma_configs.json
        timeout 70 env KVSPILL_MMA_CONFIGS=$cfg python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_1 --steps 100 --kv-cache-memory 16GiB --ctx 2048 --concurrency $c > $OUT/q41_${c}_${v}_$r.txt 2>&1
        echo "q41 $c x 2K $v $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/q41_${c}_${v}_$r.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
      done
    done
  done
fi
(cd $OUT && tar czf all14.tgz *.txt 2>/dev/null && rm -f *.txt)
echo "call 14 done at $(( $(date +%s) - T0 )) s" | tee -a $L
