#!/usr/bin/env bash
# Call 11 (prepared 2026-12-06 15:45 UTC): the tree with fused decode on for fp8 models only (the
# default; dense layers never fuse) and the Q6_K 16-token config of call 10's sweep: their GPU
# tests, then fp8 8K fused / KVSPILL_FUSED_DECODE=0 and 16 x 2K new / old Q6_K config
# (KVSPILL_MMA_CONFIGS), then the Q6_K kernel tests. Cut to fit the session's last 400 s of device
# time: one A/B each. Carry .whl. About 180 s.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call11
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs
timeout 80 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py -k fused_decode tests/kernels/test_fp8_gemv.py > $OUT/pytest_fd.txt 2>&1
echo "pytest fused rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest_fd.txt)" | tee -a $L
echo '{"Q6_K,16": {"block_n": 32, "num_warps": 2, "split_k": 16, "num_stages": 3, "words": true, "sb_per_split": 1}}' > /tmp/old_q6k16.json
F8="--shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192"
C16="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency 16"
prof fp8_fused 200 X=1 -- $F8
prof fp8_off 200 KVSPILL_FUSED_DECODE=0 -- $F8
prof c16_new 200 X=1 -- $C16
prof c16_old 200 KVSPILL_MMA_CONFIGS=/tmp/old_q6k16.json -- $C16
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_mma.py -k "quant_linear_mma_path or dispatch" > $OUT/pytest_mma.txt 2>&1
echo "pytest mma rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest_mma.txt)" | tee -a $L
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 11 done at $(( $(date +%s) - T0 )) s" | tee -a $L
