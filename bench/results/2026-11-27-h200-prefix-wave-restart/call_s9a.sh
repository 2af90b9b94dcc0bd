#!/usr/bin/env bash
# Dev only: wave fix (shared prefix blocks spill for all holders): GPU tests + W3 128K prefix bench, all three phases, 16 questions 4 at a time.
set -u
cp .smolA/smolpart_aa /tmp/ 2>/dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; nproc; free -g | head -2; df -h /tmp | tail -1; date -u
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/engine/test_prefix_cache_e2e.py tests/kv/test_runner_tiers.py tests/kv/test_transfer.py tests/kv/test_cold_stream_plan.py tests/scheduler/test_prefix_tiers.py 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -6; date -u
S='import sys,json;[print(json.dumps({k:v for k,v in d.items() if k in ("phase","cold_ttft_s","ttft_p50_s","ttft_max_s","ttft_s","read_bytes_per_hit","hit_tokens_per_tier","questions_wall_s","persist_write_s","persist_loaded_blocks","persist_bytes_read")})) for d in map(json.loads,sys.stdin)]'
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --disk-kv-gib 20 --kv-disk-dir /tmp/kvdisk --persist-dir /tmp/kvpersist --ctx 131072 --questions 16 --concurrency 4"
for ph in cpu disk persist; do
  rm -rf /tmp/kvdisk
  timeout 200 python3 -m kvspill.bench.prefix_bench $A --phases $ph --out $OUT/prefix_$ph.jsonl > $OUT/prefix_$ph.log 2>&1; echo $ph rc=$?
  grep '^{' $OUT/prefix_$ph.log | python3 -c "$S"; grep -E "Traceback|Error" $OUT/prefix_$ph.log | tail -3; date -u
done
