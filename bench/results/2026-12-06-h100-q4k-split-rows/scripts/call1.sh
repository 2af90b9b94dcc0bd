#!/usr/bin/env bash
# Call 1: on an H200, issue 54's rows first (call 30's script, the tree's defaults); on any card,
# the tensor-core kernels' strided split order against contiguous split ranges (ranges_patch.py's
# copy), kernel by kernel and in the engine at 8 / 32 x 2K, alternated.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call1
R=bench/results/2026-12-06-h100-q4k-split-rows/scripts
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash bench/results/2026-12-06-h100-gated-down/scripts/call30.sh
  exit 0
fi
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
mkdir -p /tmp/pr && cp -r kvspill /tmp/pr/ && python3 $R/ranges_patch.py /tmp/pr | tee -a $L
PYTHONPATH=/tmp/site:/tmp/pr timeout 150 python3 -m pytest -q -x tests/kernels/test_gguf_mma.py tests/kernels/test_q6k_split.py -p no:cacheprovider 2>&1 | tail -3 | tee -a $L
for run in 1 2; do
  timeout 100 python3 $R/sweep_ranges.py strided >> $OUT/sweep.jsonl 2>>$OUT/sweep.err
  PYTHONPATH=/tmp/site:/tmp/pr timeout 100 python3 $R/sweep_ranges.py ranges >> $OUT/sweep.jsonl 2>>$OUT/sweep.err
  echo "sweep $run at $(( $(date +%s) - T0 )) s" | tee -a $L
done
for run in 1 2; do
  for c in 8 32; do
    prof strided_c${c}_$run 560 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency $c
    prof ranges_c${c}_$run 560 PYTHONPATH=/tmp/site:/tmp/pr -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency $c
  done
done
(cd $OUT && tar czf prof.tgz *.txt && rm -f *.txt)
echo "call 1 done at $(( $(date +%s) - T0 )) s" | tee -a $L
