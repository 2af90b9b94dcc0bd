#!/usr/bin/env bash
# Call 1 (2026-11-27): GPU tests of --attention cpu via the tiers, calibration on a quiet host,
# the CPU kernel at 128K, W1 all-KV-in-RAM (32K, 128K), W3 128K stream vs split.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done; python3 --version
export PYTHONPATH=/tmp/site:$PWD
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; nproc; uptime
lscpu | grep -E "Model name|Socket|NUMA node\(s\)" > $OUT/host.txt; lscpu | grep -o "avx512_bf16\|amx_bf16" | sort -u >> $OUT/host.txt; cat $OUT/host.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py -k attention_cpu 2>&1 | tail -4 | tee $OUT/gpu_tests.txt
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kv/test_runner_tiers.py tests/kernels/test_cpu_attention.py 2>&1 | tail -3 | tee -a $OUT/gpu_tests.txt
python3 -c "import fastapi, gguf, pydantic; print(\"deps ok\")"
date -u; timeout 150 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A12 "calibration saved" $OUT/calibrate.txt || tail -5 $OUT/calibrate.txt
date -u; timeout 90 python3 -m kvspill.bench.cpu_attention_bench --contexts 131072 --dtypes bf16 --threads 16 --repeats 5 --out $OUT/cpu_attention.jsonl 2>&1 | tail -4

date -u; timeout 200 python3 -m kvspill.bench --shape llama-1b --cap-gib 16 --cpu-kv-gib 6 --ctx 32768 131072 --new-tokens 32 --attention cpu --mode w1-attention-cpu --out $OUT/w1_attention_cpu.jsonl 2>&1 | grep -v Warning | tail -3
for path in stream split; do
  date -u; timeout 110 python3 -m kvspill.bench --shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --ctx 131072 --new-tokens 32 --cold-attention $path --out $OUT/w3_128k.jsonl 2>&1 | grep -v Warning | tail -2
done
date -u
