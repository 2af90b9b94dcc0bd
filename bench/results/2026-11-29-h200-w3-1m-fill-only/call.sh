#!/usr/bin/env bash
# Next session: W3 1M fp8 in 24 GiB, decode and memory, prefill attention skipped (one call); a 2 s nvidia-smi sampler.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; free -g | head -2
( while true; do echo "$(date +%s) $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)"; sleep 2; done ) > $OUT/smi.txt 2>&1 &
timeout 540 python3 -m kvspill.bench --shape llama-8b --cap-gib 24 --cpu-kv-gib 60 --ctx 1048576 --chunk 16384 \
    --new-tokens 8 --warmup-tokens 2 --kv-cache-dtype fp8 --fill-only-prefill --mode auto-fp8-1m \
    --out $OUT/w3_1m_fill.jsonl 2>&1 | grep -iv warning | tail -20
echo "card peak MiB: $(sort -k2 -n $OUT/smi.txt | tail -1)"; date -u
