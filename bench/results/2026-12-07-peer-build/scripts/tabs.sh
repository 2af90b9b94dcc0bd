#!/usr/bin/env bash
# Not an H200, llama.cpp's binaries already built (prepared 2026-12-07 16:55 UTC; carry .whl;
# about 200 s): the kernel tables call 1 here lost to the build (32 x 2K ran past its limit) and
# two more, PDL off (each kernel's own GPU time): random 8B Q4_K_M 32 / 1 x 2K, 8B fp8 8K; each
# table straight into $OUT (four files), so that a call cut short keeps what it finished.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh tabs
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
R="--shape llama-8b:q4_k_m --steps 100"
prof c32_tab_pdl0 120 KVSPILL_PDL=0 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 32 --kernels 14
prof c1_tab_pdl0 150 KVSPILL_PDL=0 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 1 --kernels 14
prof fp8_tab_pdl0 170 KVSPILL_PDL=0 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192 --kernels 14
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
