#!/usr/bin/env bash
# Session 24, call C: block_keys launch shapes and selection thresholds swept at W5/W1 sizes (outputs
# equal bit for bit), then W5 128K with the fastest settings against the current ones, 8- and 16-token blocks.
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; git log --oneline -1 2>/dev/null
timeout 200 python3 .devbench/s24/sel_micro.py $OUT/pick.json 2>&1 | grep -iv warn | tee $OUT/micro.txt | tail -60
[ -f $OUT/pick.json ] || echo '{"keys": [32, 1, 4], "sel": [8192, 512, 8]}' > $OUT/pick.json
run() { [ $(( $(date +%s) - T0 )) -lt 500 ] || { echo "skip $*"; return; }; echo "== $(date -u +%T) $*"; timeout 100 python3 "$@" > /tmp/row.log 2>&1; echo "rc=$?"; grep -iv warning /tmp/row.log | grep -i "error\|out of memory\|tuned" | tail -3; }
W5="--shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 131072 --new-tokens 32 --cold-attention sparse --sparse-budget-tokens 4096"
run .devbench/s24/tuned_bench.py $OUT/pick.json $W5 --block-size 8 --mode tuned-bs8 --out $OUT/w5.jsonl
run -m kvspill.bench $W5 --block-size 8 --out $OUT/w5.jsonl
run .devbench/s24/tuned_bench.py $OUT/pick.json $W5 --mode tuned-bs16 --out $OUT/w5.jsonl
run .devbench/s24/tuned_bench.py $OUT/pick.json $W5 --block-size 8 --mode tuned-bs8 --out $OUT/w5.jsonl
run -m kvspill.bench $W5 --out $OUT/w5.jsonl
python3 .devbench/s22/show.py $OUT/w5.jsonl 2>&1 | tail -8
date -u
