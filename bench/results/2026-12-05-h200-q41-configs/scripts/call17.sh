#!/usr/bin/env bash
# Call 17 (2026-12-05): Q5_K (Q5_K_M files' main type) at 4 / 16 / 32 tokens, which keep the dot kernel /
# dequantize-then-GEMM (only 5-8 tokens have an entry): its GPU tests, `mma_sweep --types Q5_K
# --forms sub`, then random 8B Q5_K at 16 and 32 x 2K with the picks against without, alternated.
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call17
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_gguf_mma.py -k "q5k or tuned" > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
timeout 260 python3 -m kvspill.bench.mma_sweep --types Q5_K --forms sub --tokens 4 16 32 --budget-s 170 --out $OUT/sweep 2>&1 | tail -6 | tee -a $L
if grep -q "Q5_K" $OUT/sweep/mma_configs.json 2>/dev/null; then
  for r in a b; do
    for v in picks none; do
      for c in 16 32; do
        left 380 || break 3
        cfg=; [ $v = picks ] && cfg=$OUT/sweep/mma_configs.json
        timeout 70 env KVSPILL_MMA_CONFIGS=$cfg python3 -m kvspill.bench.profile_decode --shape llama-8b:q5_k --steps 100 --kv-cache-memory 16GiB --ctx 2048 --concurrency $c > $OUT/q5k_${c}_${v}_$r.txt 2>&1
        echo "q5k $c x 2K $v $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/q5k_${c}_${v}_$r.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
      done
    done
  done
fi
(cd $OUT && tar czf all17.tgz *.txt 2>/dev/null && rm -f *.txt)
echo "call 17 done at $(( $(date +%s) - T0 )) s" | tee -a $L
