#!/usr/bin/env bash
# Session 24, call D: cold streams above the compute stream's priority (KVSPILL_COLD_STREAM_PRIORITY=1, the
# new default) against the old equal priority (=0), W5 128K with 8- and 16-token blocks, alternated;
# then 8-token blocks at W3 512K and W1 1M (prefill attention skipped: decode speed only).
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; git log --oneline -1 2>/dev/null
run() { p=$1; shift; [ $(( $(date +%s) - T0 )) -lt 470 ] || { echo "skip $*"; return; }; echo "== $(date -u +%T) prio=$p $*"; KVSPILL_COLD_STREAM_PRIORITY=$p timeout 120 python3 -m kvspill.bench "$@" > /tmp/row.log 2>&1; echo "rc=$?"; grep -iv warning /tmp/row.log | grep -i "error\|out of memory" | tail -3; }
W5="--shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --new-tokens 32 --cold-attention sparse --sparse-budget-tokens 4096"
run 1 $W5 --block-size 8 --mode prio1-bs8 --out $OUT/w5.jsonl
run 0 $W5 --block-size 8 --mode prio0-bs8 --out $OUT/w5.jsonl
run 1 $W5 --mode prio1-bs16 --out $OUT/w5.jsonl
run 0 $W5 --mode prio0-bs16 --out $OUT/w5.jsonl
run 1 $W5 --block-size 8 --mode prio1-bs8 --out $OUT/w5.jsonl
run 1 --shape llama-1b --cap-gib 16 --cpu-kv-gib 34 --ctx 1048576 --chunk 16384 --new-tokens 64 --sparse-budget-tokens 4096 --cold-attention sparse --block-size 8 --fill-only-prefill --mode prio1-w1-1m-bs8 --out $OUT/w5.jsonl
run 1 --shape llama-8b --cap-gib 24 --cpu-kv-gib 66 --ctx 524288 --chunk 8192 --new-tokens 32 --sparse-budget-tokens 4096 --cold-attention sparse --block-size 8 --fill-only-prefill --mode prio1-w3-512k-bs8 --out $OUT/w5.jsonl
python3 .devbench/s22/show.py $OUT/w5.jsonl 2>&1 | tail -9
[ $(( $(date +%s) - T0 )) -lt 500 ] && KVSPILL_COLD_STREAM_PRIORITY=1 timeout 60 python3 .devbench/s24/w5_prof.py $W5 --block-size 8 --fill-only-prefill 2>&1 | grep -iv warn | tail -14
date -u
