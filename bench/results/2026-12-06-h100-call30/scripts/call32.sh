#!/usr/bin/env bash
# Call 32 (2026-12-06 05:17 UTC, H100, right after call 30 on the same machine): per-kernel CUDA
# time (torch.profiler, 14 steps) of 32 / 8 / 1 x 2K with PDL off, and whether the image has ncu.
set -u; . bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call32
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
which ncu nsys 2>&1 | tee -a $L; ls /usr/local/cuda*/bin 2>/dev/null | grep -E 'ncu|nsys' | tee -a $L
prof c32_tab_pdl0 200 KVSPILL_PDL=0 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency 32 --kernels 14
prof c8_tab_pdl0 260 KVSPILL_PDL=0 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency 8 --kernels 14
prof c1_tab_pdl0 300 KVSPILL_PDL=0 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency 1 --kernels 14
cd $OUT && tar czf all32.tgz *.txt && rm -f *.txt
