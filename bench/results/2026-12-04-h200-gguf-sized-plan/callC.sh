#!/usr/bin/env bash
# Call C: the sized plan of a GGUF file on the card (4fdd07f): random Q4_K_M-typed files (llama-1b, llama-8b) written here,
# profile_decode's plan line beside the measured step, and the same shapes as random:SHAPE:q4_k_m (no file).
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/gguf-*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s46; L=$OUT/callC.log
{ date -u; git log --oneline | head -1; git status --short | head -5; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
python3 $S/q4km_file.py llama-8b /tmp/l8b.gguf 2>&1 | tail -1 | tee -a $L
python3 $S/q4km_file.py llama-1b /tmp/l1b.gguf 2>&1 | tail -1 | tee -a $L
echo "files at $(( $(date +%s) - T0 )) s" | tee -a $L
P="python3 -m kvspill.bench.profile_decode --steps 100 --kv-cache-memory 12GiB"
for m in /tmp/l8b.gguf /tmp/l1b.gguf; do
  for cc in "8192 1" "2048 1" "2048 8" "2048 32"; do
    set -- $cc
    [ $(( $(date +%s) - T0 )) -lt 400 ] || break 2
    timeout 60 $P --model $m --ctx $1 --concurrency $2 > $OUT/e.txt 2>&1
    echo "$(basename $m) ctx $1 x $2: $(grep engine.step $OUT/e.txt | tr -s ' ') | $(grep '  plan' $OUT/e.txt | tr -s ' ')" | tee -a $L
  done
done
for cc in "8192 1" "2048 8"; do
  set -- $cc
  timeout 60 $P --shape llama-8b:q4_k_m --ctx $1 --concurrency $2 > $OUT/e.txt 2>&1
  echo "random:llama-8b:q4_k_m ctx $1 x $2: $(grep engine.step $OUT/e.txt | tr -s ' ') | $(grep '  plan' $OUT/e.txt | tr -s ' ')" | tee -a $L
done
echo "call C done at $(( $(date +%s) - T0 )) s" | tee -a $L
