#!/usr/bin/env bash
# Call 29 (prepared 2026-12-06 01:55 UTC): the landed defaults unset (gated down projection, Q4_K
# lane passes at 2 tokens, three attention stages from 32 sequences) on an H100: random
# llama-8b:q4_k_m at 1 / 2 / 8 / 32 x 2K and 8K batch 1, with KVSPILL_GATED_WORDS=0 beside 8 and 32;
# then the GPU tests of the changed paths.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call29
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
Q="--shape llama-8b:q4_k_m --steps 100"
B="--kv-cache-memory 12GiB --ctx 2048 --concurrency"
prof k8 ${LIMIT:-400} X=1 -- $Q --kv-cache-memory 16GiB --ctx 8192
for n in 1 2 8 32; do prof c$n ${LIMIT:-400} X=1 -- $Q $B $n; done
prof c8_gated0 ${LIMIT:-400} KVSPILL_GATED_WORDS=0 -- $Q $B 8
prof c32_gated0 ${LIMIT:-400} KVSPILL_GATED_WORDS=0 -- $Q $B 32
prof c8_b ${LIMIT:-400} X=1 -- $Q $B 8
prof c32_b ${LIMIT:-400} X=1 -- $Q $B 32
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_attention.py tests/kernels/test_gguf_mma.py tests/engine/test_gpu.py tests/model/test_random_q4km.py -k "gated or decode or words or q4km or lane" > $OUT/pytest29.txt 2>&1
echo "pytest rc $?: $(tail -1 $OUT/pytest29.txt)" | tee -a $L
(cd $OUT && tar czf all29.tgz *.txt && rm -f *.txt)
echo "call 29 done at $(( $(date +%s) - T0 )) s" | tee -a $L
