#!/usr/bin/env bash
# Final call of the session of 2026-12-01: W1 8K and W5 (fill-only) before (bee5c44) and after the
# house move, alternating, then the GPU tests of the paths the move and the splits touched.
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; git log --oneline -1 2>/dev/null
OLD="PYTHONPATH=/tmp/site:$PWD/.devbench/before"
NEW="PYTHONPATH=/tmp/site:$PWD"
W1_OLD="--shape llama-1b --cap-gib 16 --ctx 8192 --new-tokens 64"
W1_NEW="--shape llama-1b --vram-budget 16GiB --ctx 8192 --new-tokens 64"
S="--cold-attention sparse --sparse-budget-tokens 4096 --fill-only-prefill --new-tokens 32 --ctx 131072"
W5_OLD="--shape llama-8b --cap-gib 24 --cpu-kv-gib 18 $S"
W5_NEW="--shape llama-8b --vram-budget 24GiB --cpu-kv-budget 18GiB $S"
row() { local tag=$1 env=$2; shift 2; echo "== $(date -u +%T) $tag"; env $env timeout 150 python3 -m kvspill.bench "$@" --out $OUT/$tag.jsonl > /tmp/$tag.log 2>&1; echo "rc=$?"; grep -iv warning /tmp/$tag.log | grep -i "error\|Traceback\|tok/s" | tail -3; }
row w1_before "$OLD" $W1_OLD
row w1_after "$NEW" $W1_NEW
row w5_before "$OLD" $W5_OLD
row w5_after "$NEW" $W5_NEW
row w1_after2 "$NEW" $W1_NEW
row w1_before2 "$OLD" $W1_OLD
echo "== tests $(date -u +%T) (t=$(( $(date +%s) - T0 )) s)"
export PYTHONPATH=/tmp/site:$PWD
timeout 200 python3 -m pytest -q -p no:cacheprovider -x tests/kernels/test_decode_attention.py tests/kernels/test_prefill_attention.py \
  tests/runner/test_stream_graphs.py tests/runner/test_sparse_graphs.py tests/kv/test_sparse_attention.py \
  tests/kv/test_cold_attention.py tests/engine/test_kv_skip_layers.py 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -8
for f in $OUT/*.jsonl; do echo "$f: $(python3 -c "import json,sys; [print(r.get('decode_tok_s'), r.get('floor_ratio'), r.get('peak_gpu_gib')) for r in map(json.loads, open(sys.argv[1]))]" $f)"; done
date -u
