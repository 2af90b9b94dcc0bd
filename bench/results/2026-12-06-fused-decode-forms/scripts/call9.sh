#!/usr/bin/env bash
# Call 9 (prepared 2026-12-06 14:00 UTC, not run): fused decode's forms on W1, 8B fp8 and 8B bf16
# at 8K, alternated twice: the checkout (separate kernels), fused_decode.diff (one load of the row
# before the loop for the norm's sum, the same values as the separate kernels) and that plus
# norm_in_loop.diff (no pass before the loop: x^2 summed beside the products of h * g, the dot
# scaled by rstd after). The in-loop form's logits against the float32 model's, Triton's
# interpreter, tiny models (% of the norm): Llama 2.50, Qwen2 1.13, Qwen3 2.10; the unfused bf16
# step 2.53 / 0.95 / 1.73, the exact fused form 3.37 / 1.19 / 2.89. Each copy's fused-decode GPU
# tests run first from its own folder (greedy tokens equal to unfused: not guaranteed for the
# in-loop form). On an H200: issue 54's random-shape rows after (8K, 1 / 8 / 32 x 2K, W1 bench).
# Carry .whl.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call9
. bench/results/2026-12-06-h100-words-one-dot/scripts/prof_tree.sh
D=bench/results/2026-12-06-fused-decode-forms/scripts
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs  # $OUT keeps few files: all but the log tarred
mkdir -p /tmp/fd && cp -r kvspill tests pyproject.toml /tmp/fd/ && (cd /tmp/fd && git apply --exclude="docs/*" $OLDPWD/$D/fused_decode.diff) && echo "patched /tmp/fd" | tee -a $L
mkdir -p /tmp/nil && cp -r /tmp/fd/. /tmp/nil/ && (cd /tmp/nil && git apply --exclude="docs/*" $OLDPWD/$D/norm_in_loop.diff) && echo "patched /tmp/nil" | tee -a $L
for tree in fd nil; do
  which_tree $tree PYTHONPATH=/tmp/site:/tmp/$tree
  (cd /tmp/$tree && PYTHONSAFEPATH=1 PYTHONPATH=/tmp/site:/tmp/$tree timeout 100 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py -k fused_decode > $OUT/pytest_$tree.txt 2>&1)
  echo "pytest ($tree copy) rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest_$tree.txt)" | tee -a $L
done
W1="--shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192"
B8="--shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192"
F8="--shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192"
for run in 1 2; do
  for shape in w1 fp8 bf16; do
    case $shape in w1) S=$W1;; fp8) S=$F8;; bf16) S=$B8;; esac
    prof ${shape}_off_$run 440 -- $S
    prof ${shape}_fd_$run 440 PYTHONPATH=/tmp/site:/tmp/fd KVSPILL_FUSED_DECODE=1 -- $S
    prof ${shape}_loop_$run 440 PYTHONPATH=/tmp/site:/tmp/nil KVSPILL_FUSED_DECODE=1 -- $S
  done
done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency"
  prof k8 480 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192
  prof c8 500 -- $A 8
  prof c1 520 -- $A 1
  prof c32 540 -- $A 32
  left 560 && { timeout 30 python3 -m kvspill.bench --shape llama-1b --vram-budget 16GiB --ctx 8192 --new-tokens 64 --out $OUT/w1.jsonl > $OUT/w1.txt 2>&1; echo "w1 bench rc $? at $(( $(date +%s) - T0 )) s: $(grep -o '"decode_tok_s": [0-9.]*' $OUT/w1.jsonl)" | tee -a $L; }
fi
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 9 done at $(( $(date +%s) - T0 )) s" | tee -a $L
