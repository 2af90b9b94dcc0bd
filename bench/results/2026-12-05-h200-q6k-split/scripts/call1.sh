#!/usr/bin/env bash
# Call 1 of 2026-12-05: llama.cpp's build and the llama-quantize Q4_K_M file in the background
# (niced, for call 2's same-file rows); on the GPU: the kernel tests of the words form and the
# split Q6_K layout; q6k_split_cost.py (the 8-token tensor-core kernel and the one-token GEMV on
# the 8B's Q6_K shapes, gguf's layout against the split one, output digests); the engine's 8K
# batch-1 and 8 x 2K rows with KVSPILL_Q6K_SPLIT=1 / 0 / 1, alternated; 8 x 2K without the scale pairs.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call1
(nice -n 19 bash .peer/llamacpp_peer.sh build > /tmp/build.log 2>&1; echo "build done at $(( $(date +%s) - T0 )) s" >> /tmp/build.log
 SHAPE=8b QUANT=Q4_K_M nice -n 10 bash .peer/llamacpp_peer.sh model >> /tmp/build.log 2>&1; echo "model done at $(( $(date +%s) - T0 )) s" >> /tmp/build.log) &
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_q6k_split.py tests/kernels/test_gguf_mma.py \
  -k "split or pairs or pack_scales or half_activations or two_byte or token_tiles or words_split_k" tests/model/test_random_q4km.py > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
timeout 120 python3 $S/q6k_split_cost.py both >> $OUT/q6k_split.jsonl 2>&1
echo "q6k_split rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/q6k_split.jsonl | cut -c1-600)" | tee -a $L
P8K="python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192"
P2K="python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency 8"
for v in 1 0 1; do
  for row in 8k 8x2k; do
    [ $row = 8k ] && cmd=$P8K || cmd=$P2K
    timeout 70 env KVSPILL_Q6K_SPLIT=$v $cmd > $OUT/split${v}_$row.txt 2>&1
    echo "split=$v $row rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/split${v}_$row.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-220)" | tee -a $L
  done
done
timeout 50 env KVSPILL_SCALE_PAIRS=0 $P2K > $OUT/pairs0_8x2k.txt 2>&1
echo "pairs=0 8x2k rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step' $OUT/pairs0_8x2k.txt | tr -s ' ' | cut -c1-160)" | tee -a $L
(cd $OUT && tar czf all1.tgz split*.txt pairs0*.txt && rm -f split*.txt pairs0*.txt)
while ! grep -q "model done" /tmp/build.log && [ $(( $(date +%s) - T0 )) -lt 585 ]; do sleep 5; done
tail -5 /tmp/build.log | tee -a $L; ls -la /tmp/l8b-Q4_K_M.gguf 2>&1 | tee -a $L
echo "call 1 done at $(( $(date +%s) - T0 )) s" | tee -a $L
