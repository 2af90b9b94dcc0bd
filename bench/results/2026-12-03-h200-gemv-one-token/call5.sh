set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
date -u; git log -1 --format=%h; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_gemv.py tests/kernels/test_gguf_mma.py tests/kernels/test_gguf_dequant.py > $OUT/gpu_tests.log 2>&1; echo tests rc=$?; tail -3 $OUT/gpu_tests.log
timeout 120 python3 -m kvspill.bench.kernels_gguf --types Q4_K Q6_K --tokens 1 2 2>&1 | grep -v Warn | tee $OUT/kernels_gguf.txt
P="--shape llama-8b:q4_k --ctx 8192 --steps 100"
timeout 120 python3 .devbench/prof_before.py $P > $OUT/prof_before_8k.txt 2>&1; echo rc $?
timeout 120 python3 -m kvspill.bench.profile_decode $P --kernels 10 > $OUT/prof_after_8k.txt 2>&1; echo rc $?
for f in prof_before_8k prof_after_8k; do echo == $f; grep -A1 "pure decode steps" $OUT/$f.txt; done
grep -E "q4k_|q6k_" $OUT/prof_after_8k.txt | cut -c1-70,150-200
timeout 120 python3 .devbench/greedy.py off $OUT/greedy_off.json 2>&1 | grep -v Warn | tail -1
timeout 120 python3 .devbench/greedy.py on $OUT/greedy_on.json 2>&1 | grep -v Warn | tail -1
python3 -c "
import json; a=json.load(open('$OUT/greedy_off.json')); b=json.load(open('$OUT/greedy_on.json'))
for k in a: 
    n=next((i for i,(x,y) in enumerate(zip(a[k],b[k])) if x!=y), None); print('seq', k, len(a[k]), 'tokens, first difference at', n, 'distinct tokens', len(set(a[k])))"
P="--shape llama-8b:q4_k --ctx 32768 --steps 100"
timeout 100 python3 .devbench/prof_before.py $P > $OUT/prof_before_32k.txt 2>&1; echo rc $?
timeout 100 python3 -m kvspill.bench.profile_decode $P > $OUT/prof_after_32k.txt 2>&1; echo rc $?
for f in prof_before_32k prof_after_32k; do echo == $f; grep -A1 "pure decode steps" $OUT/$f.txt; done
date -u
