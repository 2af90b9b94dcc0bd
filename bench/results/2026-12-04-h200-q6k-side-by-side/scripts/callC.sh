#!/usr/bin/env bash
# The Q6_K side-by-side table as committed: boundary shapes, engine A/B vs the committed kernel at 8K / 32K, 1 and 8 x 2K.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=bench/results/2026-12-04-h200-q6k-side-by-side/scripts; L=$OUT/callC.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
Q6SHAPES='{"gate_up": [28672, 4096], "r14336": [14336, 4096], "qkv": [6144, 4096], "o": [4096, 4096], "down": [4096, 14336], "l1b_gate_up": [16384, 2048], "l1b_qkv": [3072, 2048]}' \
Q6CONFIGS='[[512, 2, 1], [512, 4, 1], [1024, 4, 2], [2048, 2, 4], [2048, 4, 4], [4096, 2, 4]]' SWEEP_S=100 \
  timeout 150 python3 $S/q6sweep2.py $OUT 2>&1 | grep -v Warn | cut -c1-200 | tee -a $L
A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB"
timeout 90 python3 $S/prof_q6b.py $A --ctx 8192 > $OUT/warm.txt 2>&1
for i in 1 2; do for ctx in 8192 32768; do for v in old new; do
  [ $(( $(date +%s) - T0 )) -lt 420 ] || break 3
  if [ $v = old ]; then E="Q6OLD=1"; else E="Q6OLD="; fi
  env $E timeout 40 python3 $S/prof_q6b.py $A --ctx $ctx > $OUT/prof_${v}_${ctx}_$i.txt 2>&1
  echo "$v $ctx $i rc $?: $(grep -E 'engine.step|plan ' $OUT/prof_${v}_${ctx}_$i.txt | tr '\n' ' ')" | tee -a $L
done; done; done
for i in 1 2; do for c in 1 8; do
  [ $(( $(date +%s) - T0 )) -lt 520 ] || break 2
  timeout 40 python3 $S/prof_q6b.py --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency $c > $OUT/prof_new_2k_c${c}_$i.txt 2>&1
  echo "new 2K c$c $i rc $?: $(grep -E 'engine.step|plan ' $OUT/prof_new_2k_c${c}_$i.txt | tr '\n' ' ')" | tee -a $L
done; done
(cd $OUT && tar czf all.tgz *.txt && rm -f prof_*.txt warm.txt)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
