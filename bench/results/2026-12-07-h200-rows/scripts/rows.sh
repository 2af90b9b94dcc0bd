#!/usr/bin/env bash
# An H200 (prepared 2026-12-07 12:15 UTC; carry .whl): issue 54's rows that need no
# peer, on today's defaults (the norm handoff for every format, fused fp8 decode, the mixed qkv,
# the gated down projection, the producers' tail loads), none of them measured on an H200 since
# 2026-12-05 19:32: random 8B Q4_K_M 8K / 32K batch 1, 1 / 8 / 32 x 2K, 8B fp8 / bf16 8K, W1 8K
# (the bench's floor ratio); 8K and 8 x 2K again; then the GPU tests on the defaults. No llama.cpp
# (its build alone takes about 240 s): the ratios to it use its H200 figures of 2026-12-05 19:32
# (../2026-12-05-h200-q41-configs/). Since 12:30 UTC also argmax_ab.sh (the lm_head's output widened
# and its argmax in one kernel, uncommitted in the tree, against the step before; about 90 s).
# Everything under $OUT is tarred at the end (8 files come back); about 420 s in all.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh rows
FINAL=$OUT OUT=/tmp/raw_out && mkdir -p $OUT  # outputs tarred into $FINAL at the end: a cut call still brings its log
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
R="--shape llama-8b:q4_k_m --steps 100"
# Since 12:50 UTC (under 470 s of device time left) the new kernel's checks and its A/B first.
timeout 120 python3 -m pytest -q -p no:cacheprovider $(ls tests/kernels/test_greedy_argmax.py 2>/dev/null) tests/engine/test_gpu.py \
  -k "greedy or match_the_cpu_path or the_norm_handoff_is_every" > $OUT/gpu_tests_first.txt 2>&1
echo "gpu tests (argmax kernel) rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/gpu_tests_first.txt)" | tee -a $L
grep -E "^FAILED" $OUT/gpu_tests_first.txt | head -20 | tee -a $L
A=150 . bench/results/2026-12-07-h200-rows/scripts/argmax_ab.sh
prof k8 190 X=1 -- $R --kv-cache-memory 16GiB --ctx 8192
prof c1 210 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 1
prof c8 230 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 8
prof fp8 250 X=1 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
prof bf16 270 X=1 -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
left 290 && { timeout 45 python3 -m kvspill.bench --shape llama-1b --vram-budget 16GiB --ctx 8192 \
  --new-tokens 64 --out $OUT/w1.jsonl > $OUT/w1.txt 2>&1
  echo "w1 rc $? at $(( $(date +%s) - T0 )) s: $(grep -oE '"(decode_tok_s|floor_ratio)": [0-9.]*' $OUT/w1.jsonl | tr '\n' ' ')" | tee -a $L; }
prof c32 310 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 32
prof k32 330 X=1 -- $R --kv-cache-memory 16GiB --ctx 32768
prof k8_b 350 X=1 -- $R --kv-cache-memory 16GiB --ctx 8192
prof c8_b 370 X=1 -- $R --kv-cache-memory 12GiB --ctx 2048 --concurrency 8
prof fp8_b 390 X=1 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
prof bf16_b 410 X=1 -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
left 420 && { timeout 200 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py tests/model/test_random_q4km.py \
  $(ls tests/kernels/test_greedy_argmax.py 2>/dev/null) > $OUT/gpu_tests.txt 2>&1
  echo "gpu tests (defaults) rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/gpu_tests.txt)" | tee -a $L
  grep -E "^FAILED" $OUT/gpu_tests.txt | head -20 | tee -a $L; }
(cd $OUT && tar czf $FINAL/rows.tgz .)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
