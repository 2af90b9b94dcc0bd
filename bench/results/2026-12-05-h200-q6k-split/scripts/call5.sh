#!/usr/bin/env bash
# Call 5 (prepared for a later session): whether the one-token Q6_K GEMV's loss in the split layout
# is the scale parts' first read: scale_prefetch.diff asks L2 for each program's rows' scale parts
# (past the quants in the split layout) before the PDL wait, as the row-start prefetch already
# does for gguf's layout, where a block's scales follow its quants. Kernels (q6k_split_cost.py) and
# the engine's 8K batch-1 row: gguf's layout, split (the split configs, Q6K_INT16X_SPLIT_CONFIGS, since call 4),
# split with the prefetch, alternated (80 s a run: a fresh machine compiles on the first). Also
# kv_prefetch.diff (gguf's layout): decode attention asks L2 for each split's first 64 keys' K and
# V rows before its PDL wait (seq_lens and the block table are the step's host copies), so the
# attention's first reads overlap the qkv GEMV's tail; its kernel tests on the card first.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call5
N=bench/results/2026-12-05-h200-q6k-split/scripts
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192"
git apply $N/kv_prefetch.diff && timeout 120 python3 -m pytest -q tests/kernels/test_decode_attention.py 2>&1 | tail -1 | sed 's/^/kv_prefetch tests: /' | tee -a $L
git apply -R $N/kv_prefetch.diff
for run in split0 split1 prefetch kvpf split0b split1b prefetchb kvpfb; do
  case $run in
    prefetch*) git apply $N/scale_prefetch.diff; v=1 ;;
    kvpf*) git apply $N/kv_prefetch.diff; v=0 ;;
    split0*) v=0 ;;
    split1*) v=1 ;;
  esac
  [ $run = prefetch ] && timeout 100 python3 $S/q6k_split_cost.py prefetch >> $OUT/q6k_split.jsonl 2>&1
  [ $run = split1 ] && timeout 100 python3 $S/q6k_split_cost.py split >> $OUT/q6k_split.jsonl 2>&1
  timeout 80 env KVSPILL_Q6K_SPLIT=$v python3 -m kvspill.bench.profile_decode $A > $OUT/$run.txt 2>&1
  echo "$run rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step' $OUT/$run.txt | tr -s ' ')" | tee -a $L
  case $run in prefetch*) git apply -R $N/scale_prefetch.diff ;; kvpf*) git apply -R $N/kv_prefetch.diff ;; esac
done
# The kernel tables the remaining bars need (none is recorded at 32 x 2K, W1 or fp8): 32 x 2K split,
# W1 8K, the 8B fp8 8K; then decode attention's splits and tiles at 1 x 8K, 8 and 32 x 2K.
for t in "c32 1 --shape llama-8b:q4_k_m --ctx 2048 --concurrency 32 --kv-cache-memory 16GiB" \
         "w1 0 --shape llama-1b --ctx 8192 --kv-cache-memory 16GiB" \
         "fp8 0 --shape llama-8b:fp8 --ctx 8192 --kv-cache-memory 16GiB"; do
  set -- $t; name=$1; v=$2; shift 2
  timeout 90 env KVSPILL_Q6K_SPLIT=$v python3 -m kvspill.bench.profile_decode "$@" --steps 60 --kernels 5 > $OUT/k_$name.txt 2>&1
  echo "k_$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step' $OUT/k_$name.txt | tr -s ' ')" | tee -a $L
done
timeout 200 python3 $N/attn_splits.py $OUT/attn_splits.json 2>&1 | tee -a $L | tail -5
echo "attn_splits done at $(( $(date +%s) - T0 )) s" | tee -a $L
grep -o '"[a-z_ ]*1 token": [0-9.]*' $OUT/q6k_split.jsonl | tee -a $L
(cd $OUT && tar czf all5.tgz split*.txt prefetch*.txt kvpf*.txt k_*.txt && rm -f split*.txt prefetch*.txt kvpf*.txt k_*.txt)
echo "call 5 done at $(( $(date +%s) - T0 )) s" | tee -a $L
