#!/usr/bin/env bash
# Dev only: int8 KV decode at 8K: the shapes of the ops of a graphed decode step are only seen at capture; profile eager steps with shapes.
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
EAGER=1 SHAPES=1 timeout 150 python3 .devbench/sparse_prof.py --shape llama-8b --cap-gib 24 --cpu-kv-gib 18 --ctx 8192 --cold-attention stream --kv-cache-dtype int8 > $OUT/prof_int8_eager.log 2>&1; echo "== rc=$?"
grep -E "ms/step|Traceback|Error" $OUT/prof_int8_eager.log | tail -3
grep -A 8 "Self CUDA" $OUT/prof_int8_eager.log | head -9 | cut -c1-90,150-185
grep -A 28 "BY SHAPE" $OUT/prof_int8_eager.log | grep -E "aten::(mm|matmul|bmm|linear|addmm|copy_|to|_to_copy)" | cut -c1-60,100-400 | head -14
