#!/usr/bin/env bash
# Call F: the mixed layers' parts written into one output (HEAD) against HEAD~1's concatenation, alternating, one machine.
set -u
T0=$(date +%s)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
L=$OUT/callF.log; { date -u; git log --oneline | head -2; } | tee $L
timeout 60 python3 -m pytest -q -x tests/kernels/test_gguf_gemv.py -k wider tests/model/test_quant_linear_shards.py > $OUT/tests.log 2>&1; echo "tests rc $? $(tail -1 $OUT/tests.log)" | tee -a $L
mkdir -p /tmp/old && git show HEAD~1:kvspill/model/quant.py > /tmp/old/quant.py && cp kvspill/model/quant.py /tmp/new_quant.py
P="python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --steps 100"
for r in 1 2; do
  for v in new old; do
    if [ $v = old ]; then cp /tmp/old/quant.py kvspill/model/quant.py; else cp /tmp/new_quant.py kvspill/model/quant.py; fi
    [ $(( $(date +%s) - T0 )) -lt 290 ] || break 2
    timeout 45 $P --ctx 8192 --kv-cache-memory 8GiB > $OUT/e.txt 2>&1; echo "$v c1 8K r$r: $(grep engine.step $OUT/e.txt)" | tee -a $L
    timeout 45 $P --ctx 2048 --concurrency 8 --kv-cache-memory 8GiB > $OUT/e.txt 2>&1; echo "$v c8 2K r$r: $(grep engine.step $OUT/e.txt)" | tee -a $L
  done
done
cp /tmp/new_quant.py kvspill/model/quant.py
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
