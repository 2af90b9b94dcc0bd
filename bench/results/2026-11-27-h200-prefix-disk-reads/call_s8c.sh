#!/usr/bin/env bash
# Dev only: disk-tier prefix hits: parallel disk reads + shared blocks loaded once (new) vs before (old), one call.
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; nproc; free -g | head -2; df -h /tmp | tail -1; date -u
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/kv/test_cold_attention.py tests/kv/test_cold_stream_plan.py tests/kv/test_disk_pool.py tests/kv/test_runner_tiers.py 2>&1 | tail -2
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --disk-kv-gib 20 --kv-disk-dir /tmp/kvdisk --ctx 131072 --questions 8 --concurrency 4 --phases disk"
S='import sys,json;[print(json.dumps({k:v for k,v in d.items() if k in ("phase","cold_ttft_s","ttft_p50_s","ttft_max_s","ttft_s","read_bytes_per_hit","hit_tokens_per_tier","questions_wall_s")})) for d in map(json.loads,sys.stdin)]'
for m in new old; do
  rm -rf /tmp/kvdisk
  MODE=$m timeout 270 python3 .devbench/prefix_drv.py $A --out $OUT/prefix_disk_$m.jsonl > $OUT/prefix_disk_$m.log 2>&1; echo $m rc=$?
  grep '^{' $OUT/prefix_disk_$m.log | python3 -c "$S"; grep -E "Traceback|Error" $OUT/prefix_disk_$m.log | tail -3; date -u
done
