#!/usr/bin/env bash
# Call 6 (prepared 2026-12-06 13:15 UTC, revised 14:05), whichever card comes: the GPU tests (the
# 32-key decode-attention tiles of kernels/decode_attention.SHORT_TILE_SEQS, fused decode on the
# tiny models), one-token fused decode (KVSPILL_FUSED_DECODE=1: norms, SiLU and residual adds
# folded into the dense / fp8 GEMVs) against the separate kernels on W1, 8B bf16 and 8B fp8 at 8K,
# alternated twice, 8 x 32K with the new tiles against the old
# (../../2026-12-06-h100-attn-8seq/scripts/ab_8x32k.sh), then issue 54's random-shape Q4_K_M rows
# (8K, 1 / 8 x 2K) and W1's bench row with and without the fusion. No llama.cpp (its build alone
# is 390 s). call7.sh follows on the same machine.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call6
. bench/results/2026-12-06-h100-words-one-dot/scripts/prof_tree.sh
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs  # $OUT keeps few files: all but the log tarred
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_attention.py tests/engine/test_gpu.py > $OUT/pytest6.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest6.txt)" | tee -a $L
grep -E "FAILED|Error" $OUT/pytest6.txt | head -8 | tee -a $L
W1="--shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192"
B8="--shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192"
F8="--shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192"
for run in 1 2; do
  for on in 0 1; do
    prof w1_fd${on}_$run 330 KVSPILL_FUSED_DECODE=$on -- $W1
    prof fp8_fd${on}_$run 340 KVSPILL_FUSED_DECODE=$on -- $F8
    prof bf16_fd${on}_$run 350 KVSPILL_FUSED_DECODE=$on -- $B8
  done
done
. bench/results/2026-12-06-h100-attn-8seq/scripts/ab_8x32k.sh
ab_8x32k 440
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency"
prof k8 480 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192
prof c8 495 -- $A 8
prof c1 510 -- $A 1
for on in 0 1; do
  left 535 && { KVSPILL_FUSED_DECODE=$on timeout 30 python3 -m kvspill.bench --shape llama-1b --vram-budget 16GiB --ctx 8192 --new-tokens 64 --out $OUT/w1_fd$on.jsonl > $OUT/w1_fd$on.txt 2>&1; echo "w1 bench fd$on rc $? at $(( $(date +%s) - T0 )) s: $(grep -o '"decode_tok_s": [0-9.]*' $OUT/w1_fd$on.jsonl)" | tee -a $L; }
done
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 6 done at $(( $(date +%s) - T0 )) s" | tee -a $L
