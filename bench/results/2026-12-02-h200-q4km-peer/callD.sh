#!/usr/bin/env bash
# Session 32 call D (warm, right after C): the same Q4_K_M file in both engines, kvspill with the picks
# of call C's sweep (/tmp/picks.json): llama-bench 8K / 32K, llama-batched-bench 1-32 x 2K; the engine
# bench 8K / 32K, concurrent_bench 1-8 x 2K, pure decode 8 / 16 / 32 x 2K with the picks and without;
# the GPU kernel tests in the background.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s32; L=$OUT/callD.log; F=/tmp/l8b-Q4_K_M.gguf
[ -f $F ] || bash $S/make_file.sh 2>&1 | tee -a $L
{ date -u; cat $S/COMMIT; ls -la $F; cat /tmp/picks.json; } | tee -a $L
cp /tmp/picks.json $OUT/picks.json
SHAPE=8b QUANT=Q4_K_M NPL=1,2,4,8,16,32 NPP=2048 NGEN=128 OUT=$OUT PEER=.peer T_BATCHED=150 bash $S/llamacpp_peer.sh batched 2>&1 | tee -a $L
echo "llama.cpp done at $(( $(date +%s) - T0 )) s" | tee -a $L
cat > /tmp/with_picks.py <<'PY'
import json, runpy, sys
from kvspill.kernels import gguf_mma
for key, cfg in json.load(open("/tmp/picks.json")).items():
    qtype, t = key.split(",")
    gguf_mma.MMA_CONFIGS[(qtype, int(t))] = gguf_mma.MmaConfig(**cfg)
print("MMA_CONFIGS", gguf_mma.MMA_CONFIGS, flush=True)
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__")
PY
timeout 120 python3 /tmp/with_picks.py kvspill.bench.concurrent_bench --model $F --vram-budget 16GiB --ctx 2048 --concurrency 1 2 4 8 \
  --new-tokens 64 --out $OUT/w6_kvspill.jsonl > $OUT/w6.log 2>&1
echo "w6 rc $?" | tee -a $L
python3 -c "
import json
for l in open('$OUT/w6_kvspill.jsonl'):
    r=json.loads(l); i=r.get('itl_ms') or {}
    print('w6', r['concurrency'], r.get('ok'), 'decode', r.get('decode_tok_s'), 'out', r.get('output_tok_s'), 'itl p50/p99', round(i.get('p50') or 0,2), round(i.get('p99') or 0,2), 'floor', r.get('floor_ratio'), 'peak', r.get('peak_gpu_reserved_gib'))" | tee -a $L
echo "engine benches done at $(( $(date +%s) - T0 )) s" | tee -a $L
(timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_mma.py tests/kernels/test_gguf_gemv.py > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc $?" >> $OUT/gpu_tests.log) &
PICKS=/tmp/picks.json timeout 70 python3 $S/prof_batch.py $F 16GiB 2048 8 > $OUT/prof_picks.txt 2>&1; echo "picks rc $?" | tee -a $L
for n in 8 16 32; do PICKS=off timeout 70 python3 $S/prof_batch.py $F 16GiB 2048 $n > $OUT/prof_off_$n.txt 2>&1; echo "off $n rc $?" | tee -a $L; done
grep -h RESULT $OUT/prof_picks.txt $OUT/prof_off_*.txt | tee -a $L
wait; tail -3 $OUT/gpu_tests.log | tee -a $L
echo "call D done at $(( $(date +%s) - T0 )) s" | tee -a $L
cd $OUT && tar -czf d.tgz *.log *.txt *.json *.jsonl *.err 2>/dev/null
