#!/usr/bin/env bash
# Call 6 (prepared 2026-12-06 13:15 UTC), whichever card comes: the GPU tests of the 32-key
# decode-attention tiles landed at 4-8 sequences (kernels/decode_attention.SHORT_TILE_SEQS), 8 x
# 32K with them against the old tiles (../../2026-12-06-h100-attn-8seq/scripts/ab_8x32k.sh), issue
# 54's random-shape rows with today's defaults (8K, 1 / 8 x 2K, 8B fp8 / bf16 8K, W1), then W1's
# decode attention swept at batch 1 (w1_attn_patch.py: launch config, shortest split, programs a
# SM; on the H100 its kernel ran 10.7 us a layer, 16.8 MB of KV at 1.6 TB/s). No llama.cpp (its
# build alone is 390 s). call7.sh follows on the same machine.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call6
D=bench/results/2026-12-06-tiles-scale-loads/scripts
. bench/results/2026-12-06-h100-words-one-dot/scripts/prof_tree.sh
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs  # $OUT keeps few files: all but the log tarred
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_attention.py tests/engine/test_gpu.py > $OUT/pytest_tiles.txt 2>&1
echo "pytest (checkout) rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest_tiles.txt)" | tee -a $L
. bench/results/2026-12-06-h100-attn-8seq/scripts/ab_8x32k.sh
ab_8x32k 260
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency"
prof k8 330 -- --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192
prof c8 340 -- $A 8
prof c1 350 -- $A 1
prof fp8_8k 360 -- --shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192
prof bf16_8k 370 -- --shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192
left 390 && { timeout 35 python3 -m kvspill.bench --shape llama-1b --vram-budget 16GiB --ctx 8192 --new-tokens 64 --out $OUT/w1_kvspill.jsonl > $OUT/w1.txt 2>&1; echo "w1 rc $? at $(( $(date +%s) - T0 )) s: $(grep -o '"decode_tok_s": [0-9.]*' $OUT/w1_kvspill.jsonl)" | tee -a $L; }
# W1's attention at batch 1, every run on the patched copy /tmp/ae (ab_8x32k made it)
python3 $D/w1_attn_patch.py /tmp/ae | tee -a $L
W1="--shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192"
E="PYTHONPATH=/tmp/site:/tmp/ae"
prof w1_base_1 540 $E -- $W1
prof w1_l32_2_3 540 $E XMIN=1 XLAUNCH=32,2,3 -- $W1
prof w1_l64_4_2 540 $E XMIN=1 XLAUNCH=64,4,2 -- $W1
prof w1_l64_2_3 540 $E XMIN=1 XLAUNCH=64,2,3 -- $W1
prof w1_l128_4_2 540 $E XMIN=1 XLAUNCH=128,4,2 -- $W1
prof w1_mst256 540 $E XMST=256 -- $W1
prof w1_mst64_pps8 540 $E XMST=64 XPPS=8 -- $W1
prof w1_pps2 540 $E XPPS=2 -- $W1
prof w1_l32_1_3 540 $E XMIN=1 XLAUNCH=32,1,3 -- $W1
prof w1_base_2 560 $E -- $W1
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 6 done at $(( $(date +%s) - T0 )) s" | tee -a $L
