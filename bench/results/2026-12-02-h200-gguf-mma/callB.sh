#!/usr/bin/env bash
# Session 31 call B: issue 54's baseline on the H200 (decode kernel tables at batch 1 and 8, the GGUF
# and fp8 kernel benches), and issue 55's control (eager greedy tokens at two chunk sizes).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 1; }
ROOT=$PWD; S=$ROOT/.devbench/s31
cd .devbench/clean
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; cat COMMIT
for c in 4096 512; do KVSPILL_MIXED_CUDA_GRAPHS=0 timeout 90 python3 $S/mixed_tokens.py llama-3b 16GiB $OUT/ctl_$c.json $c 2>&1 | grep -E "^steps|Error" | tail -1; done
python3 -c "
import json
a=json.load(open('$OUT/ctl_4096.json')); b=json.load(open('$OUT/ctl_512.json'))
eq=sum(x==y for p,q in zip(a,b) for x,y in zip(p,q)); n=sum(len(p) for p in a)
first=[next((i for i,(x,y) in enumerate(zip(p,q)) if x!=y), None) for p,q in zip(a,b)]
print('eager chunk 4096 vs 512: greedy tokens equal', eq, 'of', n, 'first divergence', first)
"
timeout 120 python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k --ctx 8192 --steps 200 --kernels 20 > $OUT/prof_q4k_8k.txt 2>&1; grep -A3 "engine.step" $OUT/prof_q4k_8k.txt | head -4
timeout 100 python3 -m kvspill.bench.profile_decode --shape llama-1b --ctx 8192 --steps 200 --kernels 20 > $OUT/prof_1b_8k.txt 2>&1; grep "engine.step" $OUT/prof_1b_8k.txt
timeout 120 python3 $S/prof_batch.py llama-8b:q4_k 16GiB 8 2048 > $OUT/prof_q4k_b8.txt 2>&1; grep "tok/s" $OUT/prof_q4k_b8.txt
timeout 120 python3 $S/prof_batch.py llama-8b:q4_k 16GiB 1 2048 > $OUT/prof_q4k_b1.txt 2>&1; grep "tok/s" $OUT/prof_q4k_b1.txt
timeout 150 python3 -m kvspill.bench.kernels_gguf --types Q4_K Q6_K Q8_0 --tokens 1 2 4 8 16 --dense > $OUT/kgguf.txt 2>&1; tail -40 $OUT/kgguf.txt
timeout 60 python3 -m kvspill.bench.kernels_fp8 --tokens 1 4 16 > $OUT/kfp8.txt 2>&1; tail -15 $OUT/kfp8.txt
date -u
cd $OUT && tar -czf b.tgz *.txt *.json 2>/dev/null
