#!/usr/bin/env bash
# Session 16: int8 KV with value + scale planes (this tree) against the row layout (0fa3359,
# .devbench/s16/old), same call; GPU tests of the int8 kernels first.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
PYTHONPATH=/tmp/site:$PWD timeout 240 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kv_quant.py \
  tests/kernels/test_store_kv.py tests/kernels/test_rope_store.py tests/kernels/test_decode_attention.py \
  tests/kernels/test_prefill_attention.py tests/runner/test_attention_int8.py -k "int8 or quant or store" 2>&1 | tail -4
W="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32 --ctx 32768 131072 --kv-cache-dtype int8"
run() { date -u; timeout 200 python3 -m kvspill.bench "$@" 2>&1 | grep -iv warning | tail -2 | cut -c1-160; }
PYTHONPATH=/tmp/site:$PWD run $W --mode int8-planes --out $OUT/int8.jsonl
( cd .devbench/s16/old && PYTHONPATH=/tmp/site:$PWD run $W --mode int8-rows-0fa3359 --out $OUT/int8.jsonl )
date -u
python3 - "$OUT/int8.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(f"{d['mode']:20s} ctx {d['ctx']:7d} ttft {d['ttft_s']:7.2f} (plan {d.get('plan_ttft_s')}) "
          f"decode {d['decode_tok_s']:6.2f} (plan {d.get('plan_decode_tok_s')}) gpu tok {d.get('hot_tokens')}")
PY
