#!/usr/bin/env bash
# Call A: llama.cpp builds in the background (niced) while the GPU runs kvspill's A/B of the
# decode kernel taking over RoPE and the K/V store (KVSPILL_FUSED_ROPE_DECODE=0 / 1, alternated),
# on the random Q4_K_M shape, and greedy tokens of a random Q4_K_M 8B file written here.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=bench/results/2026-12-04-h200-rope-in-decode/scripts; L=$OUT/callA.log; F=/tmp/l8b-Q4_K_M.gguf
{ date -u; git log --oneline | head -1; git status --short | head -8; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
(nice -n 19 env PEER=.peer bash .peer/llamacpp_peer.sh build > $OUT/build.log 2>&1; echo "build rc $? at $(( $(date +%s) - T0 )) s" >> $OUT/build.log) &
BUILD=$!
timeout 150 python3 $S/q4km_file.py $F > $OUT/file.log 2>&1; echo "file rc $? at $(( $(date +%s) - T0 )) s: $(ls -la $F)" | tee -a $L
P="python3 -m kvspill.bench.profile_decode"
run() {  # run NAME FUSED LIMIT ARGS...
  local name=$1 f=$2 lim=$3; shift 3
  [ $(( $(date +%s) - T0 )) -lt 540 ] || { echo "skip $name f$f (time)" | tee -a $L; return; }
  KVSPILL_FUSED_ROPE_DECODE=$f timeout $lim "$@" > $OUT/${name}_f$f.txt 2>&1
  echo "$name f$f rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/${name}_f$f.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
}
for f in 0 1; do run tok $f 70 python3 $S/tokens.py $F; done
python3 -c "
import json
try:
    a, b = (json.loads(open('$OUT/tok_f%d.txt' % v).read().strip().splitlines()[-1]) for v in (0, 1))
    for x, y in zip(a, b):
        same = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), len(x))
        print('tokens equal for', same, 'of', len(x))
except Exception as e:
    print('token compare failed', e)
" | tee -a $L
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB"
for r in 1 2; do for f in 0 1; do run p8k_r$r $f 60 $P $A --ctx 8192; done; done
for f in 0 1; do run p32k $f 60 $P $A --ctx 32768; done
for f in 0 1; do run p8x2k $f 50 $P --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency 8; done
KVSPILL_PDL=0 run k8k 1 50 $P $A --ctx 8192 --kernels 20
echo "waiting for the build at $(( $(date +%s) - T0 )) s" | tee -a $L
while kill -0 $BUILD 2>/dev/null && [ $(( $(date +%s) - T0 )) -lt 585 ]; do sleep 3; done
tail -3 $OUT/build.log | tee -a $L; ls -la /tmp/lcpp-build/bin/ 2>/dev/null | tail -4 | tee -a $L
(cd $OUT && tar czf all.tgz *.txt && rm -f *.txt)
echo "call A done at $(( $(date +%s) - T0 )) s" | tee -a $L
