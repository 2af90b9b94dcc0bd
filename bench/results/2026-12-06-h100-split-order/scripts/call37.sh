#!/usr/bin/env bash
# Call 37 (prepared 2026-12-06 06:50 UTC): the tensor-core kernel's grid with the split as the
# fast axis (this tree) against row tiles first (HEAD, unpacked to /tmp/old), alternated, on the
# random llama-8b:q4_k_m at 4 / 8 / 16 / 32 x 2K; the 32-token gate_up split in 4 (wide4.json);
# the GPU tests of the kernel; then ncu's DRAM bytes of a 32 x 2K step on this tree (call 36's
# ncu_c32_app, the old order, is the before).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call37
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
S37=bench/results/2026-12-06-h100-split-order/scripts
mkdir -p /tmp/old && git archive HEAD kvspill | tar x -C /tmp/old
OLD=PYTHONPATH=/tmp/site:/tmp/old
Q="--shape llama-8b:q4_k_m --steps 100"
B="--kv-cache-memory 12GiB --ctx 2048 --concurrency"
for n in 32 8; do prof c${n}_old 300 $OLD -- $Q $B $n; prof c${n}_new 300 X=1 -- $Q $B $n; done
for n in 32 8; do prof c${n}_new_b 300 X=1 -- $Q $B $n; prof c${n}_old_b 300 $OLD -- $Q $B $n; done
for n in 16 4; do prof c${n}_old 300 $OLD -- $Q $B $n; prof c${n}_new 300 X=1 -- $Q $B $n; done
prof c32_wide4 300 KVSPILL_MMA_CONFIGS=$S37/wide4.json -- $Q $B 32
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_mma.py > $OUT/pytest37.txt 2>&1
echo "pytest rc $?: $(tail -1 $OUT/pytest37.txt)" | tee -a $L
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum
if left 420; then
  KVSPILL_PDL=0 timeout 150 /usr/local/cuda/bin/ncu --profile-from-start off --graph-profiling node --replay-mode application \
    --metrics $M --csv --log-file $OUT/ncu_c32_new.csv python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m \
    --steps 20 --profiler-window 1 --kv-cache-memory 12GiB --ctx 2048 --concurrency 32 > $OUT/ncu_c32_new.txt 2>&1
  echo "ncu rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L
fi
(cd $OUT && tar czf all37.tgz *.txt && rm -f *.txt)
echo "call 37 done at $(( $(date +%s) - T0 )) s" | tee -a $L
