#!/usr/bin/env bash
# Call D: the Q4_K words form with its scale bytes loaded by plain (volatile) loads instead of
# cp.async through shared memory (words_volatile.py) against HEAD (words_head.py): the 8-token
# kernel per shape, the engine at 8 x 2K, and if faster the GPU tests.
set -u
T0=$(date +%s)
[ -d /tmp/site/gguf ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
S=bench/results/2026-12-04-h200-mma-dequant-cost/scripts; L=$OUT/callD.log; K=kvspill/kernels/gguf_mma_words.py
{ date -u; git log --oneline | head -1; } | tee -a $L
for r in 1 2; do for v in head volatile; do
  cp $S/words_$v.py $K
  timeout 60 python3 $S/dequant_cost.py full 2>$OUT/err_$v.txt | sed "s/\"full\"/\"$v\"/" | tee -a $L
  timeout 60 python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency 8 > $OUT/e_$v.txt 2>&1
  echo "  engine 8x2K $v r$r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step' $OUT/e_$v.txt | tr -s ' ')" | tee -a $L
done; done
cp $S/words_volatile.py $K
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_mma.py -x > $OUT/pytest_volatile.txt 2>&1
echo "pytest volatile rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest_volatile.txt)" | tee -a $L
cp $S/words_head.py $K
