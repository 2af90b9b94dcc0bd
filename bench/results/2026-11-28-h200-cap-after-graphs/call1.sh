#!/usr/bin/env bash
# Session 19, call 1: the final cap code (set after the pools and graphs, with the plan's graph
# scratch) on a GPU: W3 128K fp8 auto and bf16 stream, W5 128K sparse, each row's nvidia-smi peak
# against the 24 GiB budget; the engine's GPU tests. Leaves half of the SmolLM2 GGUF in /tmp.
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
cp .smolA/smolpart_aa /tmp/smolpart_aa &
date -u; git log --oneline -1 2>/dev/null; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; nproc; free -g | head -2
( while true; do echo "$(date +%s.%N) $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)"; sleep 0.4; done ) > $OUT/smi.txt 2>&1 &
SMI=$!
run() { [ $(( $(date +%s) - T0 )) -lt 330 ] || { echo "skip $*"; return; }; echo "== $(date -u +%T) $*"; echo "start $(date +%s) $*" >> $OUT/rows.txt; timeout 120 python3 -m kvspill.bench "$@" > /tmp/row.log 2>&1; echo "rc=$?"; echo "end $(date +%s)" >> $OUT/rows.txt; cp /tmp/row.log $OUT/row-$(date +%s).log; grep -iv warning /tmp/row.log | grep -i "error\|out of memory\|cap\|budget" | tail -4 | cut -c1-300; }
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32 --ctx 131072"
W5="--shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --new-tokens 32 --sparse-budget-tokens 4096 --cold-attention sparse"
run $A --kv-cache-dtype fp8 --mode auto-fp8-128k --out $OUT/w3.jsonl
run $A --cold-attention stream --mode stream-128k --out $OUT/w3.jsonl
run $W5 --out $OUT/w5.jsonl
kill $SMI; date -u
python3 .devbench/s19/show.py $OUT/w3.jsonl; python3 .devbench/s19/show.py $OUT/w5.jsonl
python3 .devbench/s19/smi_peaks.py $OUT/smi.txt $OUT/rows.txt
timeout $(( 575 - ($(date +%s) - T0) )) python3 -m pytest -q tests/engine/test_gpu.py tests/engine/test_startup.py -p no:cacheprovider 2>&1 | tail -6
wait; date -u; ls -la /tmp/smolpart_aa
