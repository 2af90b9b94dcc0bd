#!/usr/bin/env bash
# Session 14, call C: GPU tests of the touched paths; W3 128K fp8 auto with the engine's log (the
# startup plan's memory table and the measured KV pool line: where the plan's placement differs).
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/runner/test_stream_graphs.py tests/kv/test_cold_attention.py tests/engine/test_cold_config.py 2>&1 | tail -3 | tee $OUT/gpu_tests.txt
timeout 110 python3 -m kvspill doctor --calibrate > $OUT/calibrate.txt 2>&1; grep -A16 "calibration saved" $OUT/calibrate.txt | head -18
A="--shape llama-8b --cap-gib 24 --cpu-kv-gib 40 --new-tokens 32"
timeout 100 python3 -c "import logging, runpy, sys; logging.basicConfig(level=logging.INFO); sys.argv = ['kvspill.bench'] + sys.argv[1:]; runpy.run_module('kvspill.bench', run_name='__main__')" $A --ctx 131072 --kv-cache-dtype fp8 --mode auto-fp8-128k --out $OUT/bench.jsonl > $OUT/log_fp8.txt 2>&1
grep -iE "KV pool|memory plan|weights|activ|runtime|reserve|slack|graph" $OUT/log_fp8.txt | head -40
python3 -c "import torch; f,t=torch.cuda.mem_get_info(); print('fresh process: total', t, 'free', f)"
python3 .devbench/s14/show.py $OUT/bench.jsonl
date -u
