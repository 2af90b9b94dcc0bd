#!/usr/bin/env bash
# Session 20, call A: does W3 fp8 at 128K with 16K-token prefill chunks hit the allocator's
# fragmentation OOM under the late cap (as the 1M row did), and does expandable_segments avoid it?
# Leaves the first GGUF half in /tmp for call B.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
cp .smolA/smolpart_aa /tmp/smolpart_aa &
date -u
( while true; do echo "$(date +%T) $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits) $(nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits | tr '\n' ' ')"; sleep 0.5; done ) > $OUT/smi.txt 2>&1 &
SMI=$!
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 8 --ctx 131072 --chunk 16384 --kv-cache-dtype fp8"
timeout 130 python3 -m kvspill.bench $A --mode fp8-128k-chunk16k --out $OUT/a.jsonl > $OUT/a.log 2>&1; echo "a rc=$? $(date +%T)"
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 130 python3 -m kvspill.bench $A --mode fp8-128k-chunk16k-expandable --out $OUT/b.jsonl > $OUT/b.log 2>&1; echo "b rc=$? $(date +%T)"
kill $SMI
for f in a b; do echo "-- $f"; grep -E "out of memory|step failed|over the|tok/s|Error" $OUT/$f.log | cut -c1-330 | tail -6; python3 .devbench/s19/show.py $OUT/$f.jsonl 2>&1 | tail -3; done
sort -k3 -n $OUT/smi.txt | tail -2
wait; ls -la /tmp/smolpart_aa; date -u
