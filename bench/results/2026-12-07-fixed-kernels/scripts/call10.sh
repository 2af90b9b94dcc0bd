#!/usr/bin/env bash
# Any card (prepared 2026-12-07 10:05 UTC; carry .whl; about 260 s): with the producers' tail loads
# at once (landed after call 9), does the handoff now gain on GGUF weights too? Random 8B Q4_K_M
# at 8K, KVSPILL_NORM_HANDOFF 0 (its default) / 1 alternated three times; then the GPU tests on
# the defaults of this tree.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh gguf_handoff
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
Q="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192"
for r in a b c; do
  for h in 0 1; do prof q_h${h}_$r 200 KVSPILL_NORM_HANDOFF=$h -- $Q; done
done
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py tests/model/test_random_q4km.py > $OUT/gpu_tests.txt 2>&1
echo "gpu tests (defaults) rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/gpu_tests.txt)" | tee -a $L
grep -E "^FAILED" $OUT/gpu_tests.txt | head -20 | tee -a $L
(cd $OUT && tar czf gguf_handoff.tgz *.txt && rm -f *.txt)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
