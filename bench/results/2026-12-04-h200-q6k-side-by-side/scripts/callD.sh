#!/usr/bin/env bash
# The refined Q6_K table vs the committed kernel on the 8B / 1B shapes; the 1B Q4_K_M shape in the engine, old vs new.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=bench/results/2026-12-04-h200-q6k-side-by-side/scripts; L=$OUT/callD.log
{ date -u; git log --oneline | head -1; git status --short | head; } | tee -a $L
Q6SHAPES='{"lm_head": [128256, 4096], "gate_up": [28672, 4096], "r14336": [14336, 4096], "r8192": [8192, 4096], "qkv": [6144, 4096], "o": [4096, 4096], "down": [4096, 14336], "v": [1024, 4096], "l1b_lm_head": [128256, 2048], "l1b_gate_up": [16384, 2048], "l1b_qkv": [3072, 2048], "l1b_o": [2048, 2048], "l1b_down": [2048, 8192], "l1b_v": [512, 2048]}' \
Q6CONFIGS='[]' SWEEP_S=100 timeout 150 python3 $S/q6sweep2.py $OUT 2>&1 | grep -v Warn | cut -c1-150 | tee -a $L
A="--shape llama-1b:q4_k_m --steps 100 --kv-cache-memory 8GiB"
timeout 90 python3 $S/prof_q6b.py $A --ctx 8192 > $OUT/warm.txt 2>&1; echo "warm rc $?: $(grep -E 'engine.step' $OUT/warm.txt)" | tee -a $L
for i in 1 2; do for v in old new; do
  [ $(( $(date +%s) - T0 )) -lt 300 ] || break 2
  if [ $v = old ]; then E="Q6OLD=1"; else E="Q6OLD="; fi
  env $E timeout 40 python3 $S/prof_q6b.py $A --ctx 8192 > $OUT/prof1b_${v}_$i.txt 2>&1
  echo "1b $v 8192 $i rc $?: $(grep -E 'engine.step|plan ' $OUT/prof1b_${v}_$i.txt | tr '\n' ' ')" | tee -a $L
done; done
(cd $OUT && tar czf all.tgz *.txt && rm -f prof*.txt warm.txt)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
