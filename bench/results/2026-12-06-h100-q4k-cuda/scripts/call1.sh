#!/usr/bin/env bash
# Call 1 (prepared 2026-12-06 07:34 UTC): the CUDA Q4_K kernel's GPU tests, its sweep against the
# Triton words form (sweep.py), then the engine at 8 and 32 x 2K with it (default) and without
# (KVSPILL_Q4K_CUDA=0), alternated. It ran with q4k_mma_cuda.py and q4k_mma.cu in kvspill/kernels/ and
# gguf_mma.quant_matmul_mma calling the kernel for Q4_K (not kept: ../README.md); the module is
# imported from this folder now, and the engine runs below would both take the Triton kernel.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call1
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
timeout 60 python3 -c "import sys; sys.path.insert(0, 'bench/results/2026-12-06-h100-q4k-cuda/scripts'); import q4k_mma_cuda as qc; print('unavailable:', qc._unavailable(0))" 2>&1 | tail -5 | tee -a $L
timeout 150 python3 -m pytest -q -x -p no:cacheprovider bench/results/2026-12-06-h100-q4k-cuda/scripts/test_q4k_mma_cuda.py > $OUT/pytest1.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest1.txt)" | tee -a $L
timeout 240 python3 bench/results/2026-12-06-h100-q4k-cuda/scripts/sweep.py ${SWEEP:-} > $OUT/sweep1.jsonl 2>$OUT/sweep1.err
echo "sweep rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L
B="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency"
for n in 32 8; do
  prof c${n}_cuda 560 X=1 -- $B $n; prof c${n}_triton 560 KVSPILL_Q4K_CUDA=0 -- $B $n
done
prof c32_cuda2 575 X=1 -- $B 32
echo "call 1 done at $(( $(date +%s) - T0 )) s" | tee -a $L
