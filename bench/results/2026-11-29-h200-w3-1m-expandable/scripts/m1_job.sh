#!/usr/bin/env bash
# The 1M-token W3 row (issue 12) under the cap set after start-up (2b61caa): 8B shape, 24 GiB VRAM
# budget, fp8 KV, 60 GiB pinned cpu tier. Same command as 2026-11-28-h200-w3-1m-fp8.
cd /tmp/kvs1m
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u > /tmp/m1/start.txt
python3 -m kvspill.bench --shape llama-8b --cap-gib 24 --cpu-kv-gib 60 --ctx 1048576 --chunk 16384 \
    --new-tokens 8 --warmup-tokens 2 --kv-cache-dtype fp8 --mode auto-fp8-1m \
    --out /tmp/m1/w3_1m.jsonl > /tmp/m1/w3_1m.log 2>&1
echo "rc=$?" >> /tmp/m1/w3_1m.log
date -u > /tmp/m1/end.txt
touch /tmp/m1/done
