#!/usr/bin/env bash
# Session 18, call 1: the allocator cap on a GPU (W3 128K fp8 auto and bf16 stream: card_used_gib and
# nvidia-smi's peak against the 24 GiB budget); W5 128K with 16- and 8-token blocks, twice each.
# Also leaves half of the SmolLM2 GGUF in /tmp for call 2.
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
cp .smolA/smolpart_aa /tmp/smolpart_aa &
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; nproc; free -g | head -2
( while true; do echo "$(date +%s.%N) $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)"; sleep 0.4; done ) > $OUT/smi.txt 2>&1 &
SMI=$!
run() { [ $(( $(date +%s) - T0 )) -lt 470 ] || { echo "skip $*"; return; }; echo "== $(date -u +%T) $*"; echo "start $(date +%s) $*" >> $OUT/rows.txt; timeout 120 python3 -m kvspill.bench "$@" > /tmp/row.log 2>&1; echo "rc=$?"; echo "end $(date +%s)" >> $OUT/rows.txt; grep -iv warning /tmp/row.log | grep -i "error\|out of memory" | tail -3; }
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32 --ctx 131072"
W5="--shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --new-tokens 32 --sparse-budget-tokens 4096 --cold-attention sparse"
run $A --kv-cache-dtype fp8 --mode auto-fp8-128k --out $OUT/w3.jsonl
run $W5 --out $OUT/w5.jsonl
run $W5 --block-size 8 --out $OUT/w5.jsonl
run $A --cold-attention stream --mode stream-128k --out $OUT/w3.jsonl
run $W5 --block-size 8 --out $OUT/w5.jsonl
run $W5 --out $OUT/w5.jsonl
kill $SMI; date -u
python3 .devbench/s18/show.py $OUT/w3.jsonl; python3 .devbench/s18/show.py $OUT/w5.jsonl
python3 .devbench/s18/smi_peaks.py $OUT/smi.txt $OUT/rows.txt
wait; ls -la /tmp/smolpart_aa
