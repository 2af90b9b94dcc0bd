#!/usr/bin/env bash
# Session 12, call A: pending GPU tests; host CPU; CPU kernel old vs new; calibrate; W3 split/cpu, W1 attention cpu.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|L2|L3|NUMA node0" | tee $OUT/lscpu.txt
lscpu | grep -o "amx_bf16\|avx512_bf16\|avx512f " | sort -u | tr '\n' ' ' | tee -a $OUT/lscpu.txt; echo
timeout 100 python3 -m pytest -v -p no:cacheprovider -o faulthandler_timeout=20 tests/kv/test_stream_flag.py 2>&1 | tail -12 > $OUT/stream_flag.txt; echo "stream_flag rc ${PIPESTATUS[0]}"; tail -3 $OUT/stream_flag.txt
for t in tests/kv/test_cold_attention.py tests/kv/test_runner_tiers.py tests/kernels/test_cpu_attention.py; do
  timeout 120 python3 -m pytest -q -p no:cacheprovider $t 2>&1 | tail -1 | tee -a $OUT/gpu_tests.txt
done
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py -k attention_cpu 2>&1 | tail -1 | tee -a $OUT/gpu_tests.txt
date -u
cd .devbench/cpuattn
for d in bf16 fp8 int8 fp32; do for k in base new; do timeout 60 python3 harness.py $k.cpp 16 262144 $d $([ $d = bf16 ] && echo --read) 2>&1 | tail -1 | tee -a $OUT/kernel.txt; done; done
for t in 8 12; do timeout 60 python3 harness.py new.cpp $t 262144 bf16 --read 2>&1 | tail -1 | tee -a $OUT/kernel.txt; done
cd ../..
date -u
timeout 100 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A14 "calibration saved" $OUT/calibrate.txt | grep -E "stream|cpu_attn|host_read"
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --ctx 131072 --new-tokens 32"
run() { date -u; timeout 150 python3 -m kvspill.bench "$@" --out $OUT/bench.jsonl 2>&1 | grep -v Warning | tail -1 | cut -c1-100; }
run $A --cold-attention split
run --shape llama-1b --cap-gib 16 --cpu-kv-gib 6 --ctx 32768 131072 --new-tokens 32 --attention cpu --mode w1-attention-cpu
run $A --cold-attention cpu
date -u
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/bench.jsonl"):
    d = json.loads(l)
    print(d["mode"], d["ctx"], d["decode_tok_s"], d.get("plan_decode_tok_s"), {k: v for k, v in d.items() if k.startswith("cold_c") or k.startswith("cold_s")})
PY
