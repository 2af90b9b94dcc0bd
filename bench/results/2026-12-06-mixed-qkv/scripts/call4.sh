#!/usr/bin/env bash
# Call 4 (prepared 2026-12-06 18:05 UTC, not run): fused decode for GGUF weights
# (gguf_fused_decode.diff: one token's int16-x GEMVs with the RMSNorms, SiLU and residual adds
# folded in, as fp8 models run since 2026-12-06; KVSPILL_FUSED_DECODE_GGUF=1 turns it on). The diff
# applied to the machine's copy of the tree, its GPU tests, then random 8B Q4_K_M at 8K / 32K /
# 1 x 2K fused against the separate kernels, alternated. Land it on by default only where every row
# gains. Carry .whl. About 260 s.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call4
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
git apply --exclude="docs/*" bench/results/2026-12-06-mixed-qkv/scripts/gguf_fused_decode.diff || { echo "gguf_fused_decode.diff did not apply" | tee -a $L; exit 3; }
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs
timeout 120 python3 -m pytest -q -p no:cacheprovider -x tests/kernels/test_gguf_fused_decode.py tests/engine/test_gpu.py -k "fused or mixed" > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'passed|failed' $OUT/pytest.txt | tail -1)" | tee -a $L
K8="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192"
K32="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 32768"
C1="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048"
prof k8_fused 200 KVSPILL_FUSED_DECODE_GGUF=1 -- $K8
prof k8_sep 220 KVSPILL_FUSED_DECODE_GGUF=0 -- $K8
prof k8_fused2 240 KVSPILL_FUSED_DECODE_GGUF=1 -- $K8
prof k8_sep2 260 KVSPILL_FUSED_DECODE_GGUF=0 -- $K8
prof k32_fused 280 KVSPILL_FUSED_DECODE_GGUF=1 -- $K32
prof k32_sep 300 KVSPILL_FUSED_DECODE_GGUF=0 -- $K32
prof c1_fused 320 KVSPILL_FUSED_DECODE_GGUF=1 -- $C1
prof c1_sep 340 KVSPILL_FUSED_DECODE_GGUF=0 -- $C1
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 4 done at $(( $(date +%s) - T0 )) s" | tee -a $L
