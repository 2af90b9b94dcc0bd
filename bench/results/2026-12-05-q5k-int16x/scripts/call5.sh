#!/usr/bin/env bash
# Call 5: the one-token Q5_K GEMV on the int16-x lanes (default) against the generic FMA kernel
# (KVSPILL_INT16_X=0), Llama-3.1-8B shapes, weights streamed past L2; the int16-x kernel tests on
# the card; the engine on random llama-8b:q5_k at 8K, both ways, if time is left.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call5
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
K="python3 -m kvspill.bench.kernels_gguf --types Q5_K --tokens 1 --shapes qkv o gate_up down"
timeout 60 $K > $OUT/k_int16x.txt 2>&1; echo "kernels int16x rc $? at $(( $(date +%s) - T0 )) s"; cat $OUT/k_int16x.txt
timeout 40 env KVSPILL_INT16_X=0 $K > $OUT/k_generic.txt 2>&1; echo "kernels generic rc $? at $(( $(date +%s) - T0 )) s"; cat $OUT/k_generic.txt
left 120 && { timeout 60 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_gguf_int16x.py > $OUT/pytest.txt 2>&1; echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)"; }
P="python3 -m kvspill.bench.profile_decode --shape llama-8b:q5_k --steps 100 --kv-cache-memory 16GiB --ctx 8192"
left 140 && { timeout 45 $P > $OUT/e_int16x.txt 2>&1; echo "engine int16x rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/e_int16x.txt | tr -s ' ' | tr '\n' ' ')"; }
left 175 && { timeout 25 env KVSPILL_INT16_X=0 $P > $OUT/e_generic.txt 2>&1; echo "engine generic rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/e_generic.txt | tr -s ' ' | tr '\n' ' ')"; }
echo "call 5 done at $(( $(date +%s) - T0 )) s"
