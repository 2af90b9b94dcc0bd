#!/usr/bin/env bash
# Session 15, call C (same machine as A and B; run inline, recorded here): W3 int8 auto 128K,
# W5 sparse 128K again, W3 fp8 auto 256K.
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
run() { date -u; timeout 150 python3 -m kvspill.bench "$@" 2>&1 | grep -iv warning | tail -1 | cut -c1-100; }
run --shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32 --ctx 131072 --kv-cache-dtype int8 --mode auto-int8-128k --out $OUT/w3c.jsonl
run --shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --new-tokens 32 --sparse-budget-tokens 4096 --cold-attention sparse --mode w5-sparse-128k --out $OUT/w5c.jsonl
run --shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32 --ctx 262144 --kv-cache-dtype fp8 --mode auto-fp8-256k --out $OUT/w3c.jsonl
date -u; python3 .devbench/s15/show.py $OUT/w3c.jsonl; python3 .devbench/s15/show.py $OUT/w5c.jsonl
