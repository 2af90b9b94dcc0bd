#!/usr/bin/env bash
# Session 19, call 3: the cap set after the runner is built (engine_setup), on a GPU: W3 128K fp8
# auto with the card's peak; the engine's GPU tests. Leaves half of the SmolLM2 GGUF in /tmp.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
cp .smolA/smolpart_aa /tmp/smolpart_aa &
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
( while true; do echo "$(date +%s.%N) $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)"; sleep 0.4; done ) > $OUT/smi.txt 2>&1 &
SMI=$!
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32 --ctx 131072"
echo "start $(date +%s) W3 fp8 auto" >> $OUT/rows.txt
timeout 120 python3 -m kvspill.bench $A --kv-cache-dtype fp8 --mode auto-fp8-128k --out $OUT/w3.jsonl > $OUT/row.log 2>&1; echo "rc=$?"
echo "end $(date +%s)" >> $OUT/rows.txt
kill $SMI
python3 .devbench/s19/show.py $OUT/w3.jsonl; python3 .devbench/s19/smi_peaks.py $OUT/smi.txt $OUT/rows.txt
timeout 150 python3 -m pytest -q tests/engine/test_gpu.py tests/engine/test_startup.py -p no:cacheprovider 2>&1 | tail -4
wait; date -u; ls -la /tmp/smolpart_aa
