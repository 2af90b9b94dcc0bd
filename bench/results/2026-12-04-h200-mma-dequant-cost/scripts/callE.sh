#!/usr/bin/env bash
# Call E: the Q4_K words form with its scale bytes read from whole int32 words (words_f9.py:
# each [rows, 8] scale tensor a 4-byte load per element, shifted) against HEAD: the 8-token kernel
# per shape (and its outputs, which must be the same bits), then the engine at 8 x 2K.
set -u
T0=$(date +%s)
[ -d /tmp/site/gguf ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
S=bench/results/2026-12-04-h200-mma-dequant-cost/scripts; L=$OUT/callE.log; K=kvspill/kernels/gguf_mma_words.py
date -u | tee -a $L
for v in head f9; do
  cp $S/words_$v.py $K
  SAVE=$OUT/out_$v.pt timeout 60 python3 $S/dequant_cost.py full 2>$OUT/err_$v.txt | sed "s/\"full\"/\"$v\"/" | tee -a $L
done
python3 -c "
import torch
a, b = torch.load('$OUT/out_head.pt'), torch.load('$OUT/out_f9.pt')
print('bit-equal outputs:', {k: bool(torch.equal(a[k], b[k])) for k in a})" 2>&1 | tee -a $L
for v in f9 head; do
  cp $S/words_$v.py $K
  timeout 60 python3 $S/dequant_cost.py full 2>>$OUT/err_$v.txt | sed "s/\"full\"/\"$v\"/" | tee -a $L
done
for v in f9 head; do
  cp $S/words_$v.py $K
  timeout 45 python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency 8 > $OUT/e_$v.txt 2>&1
  echo "  engine 8x2K $v rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step' $OUT/e_$v.txt | tr -s ' ')" | tee -a $L
done
cp $S/words_head.py $K
