#!/usr/bin/env bash
# Call 7 (prepared 2026-12-06 13:15 UTC, revised 14:05), after call 6 on the same machine: W1's
# decode attention swept at batch 1 (w1_attn_patch.py on ../../2026-12-06-h100-attn-8seq's
# attn_env_patch.py: launch config, shortest split, programs a SM; on the H100 its kernel ran
# 10.7 us a layer, 16.8 MB of KV at 1.6 TB/s), then the Q6_K words form
# reading its 16 scale bytes once a super-block (../../2026-12-06-h100-q6k-scale-loads/, one
# 16-byte load split in registers; sm_90 SASS 22 -> 8 BAR.SYNC a loop) against today's, its GPU
# tests from the copy's own folder, the engine at 8 / 32 x 2K alternated twice, 16 x 2K once.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call7
Q=bench/results/2026-12-06-h100-q6k-scale-loads/scripts
D=bench/results/2026-12-06-h100-tiles-scale-loads/scripts
. bench/results/2026-12-06-h100-words-one-dot/scripts/prof_tree.sh
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs  # $OUT keeps few files: all but the log tarred
mkdir -p /tmp/w1a && cp -r kvspill /tmp/w1a/ && python3 bench/results/2026-12-06-h100-attn-8seq/scripts/attn_env_patch.py /tmp/w1a | tee -a $L
python3 $D/w1_attn_patch.py /tmp/w1a | tee -a $L
which_tree w1a PYTHONPATH=/tmp/site:/tmp/w1a
W1="--shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192"
E="PYTHONPATH=/tmp/site:/tmp/w1a"
prof w1_base_1 200 $E -- $W1
prof w1_l32_2_3 200 $E XMIN=1 XLAUNCH=32,2,3 -- $W1
prof w1_l64_4_2 200 $E XMIN=1 XLAUNCH=64,4,2 -- $W1
prof w1_l64_2_3 200 $E XMIN=1 XLAUNCH=64,2,3 -- $W1
prof w1_l128_4_2 200 $E XMIN=1 XLAUNCH=128,4,2 -- $W1
prof w1_mst256 200 $E XMST=256 -- $W1
prof w1_mst64_pps8 200 $E XMST=64 XPPS=8 -- $W1
prof w1_pps2 200 $E XPPS=2 -- $W1
prof w1_l32_1_3 200 $E XMIN=1 XLAUNCH=32,1,3 -- $W1
prof w1_base_2 200 $E -- $W1
mkdir -p /tmp/q6s && cp -r kvspill tests pyproject.toml /tmp/q6s/ && (cd /tmp/q6s && git apply $OLDPWD/$Q/q6k_scale_loads.diff) && echo "patched /tmp/q6s" | tee -a $L
which_tree q6s PYTHONPATH=/tmp/site:/tmp/q6s
(cd /tmp/q6s && PYTHONSAFEPATH=1 PYTHONPATH=/tmp/site:/tmp/q6s timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_q6k_split.py tests/kernels/test_gguf_mma.py -k "Q6_K or q6k or split" > $OUT/pytest_q6s.txt 2>&1)
echo "pytest (q6s copy) rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest_q6s.txt)" | tee -a $L
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency"
for run in 1 2; do
  for n in 8 32; do
    prof c${n}_today_$run 500 PYTHONPATH=/tmp/site:$PWD -- $A $n
    prof c${n}_q6s_$run 500 PYTHONPATH=/tmp/site:/tmp/q6s -- $A $n
  done
done
prof c16_today 540 PYTHONPATH=/tmp/site:$PWD -- $A 16
prof c16_q6s 540 PYTHONPATH=/tmp/site:/tmp/q6s -- $A 16
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 7 done at $(( $(date +%s) - T0 )) s" | tee -a $L
