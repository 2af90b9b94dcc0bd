#!/usr/bin/env bash
# Session 18, call 3b: teacher-forced agreement at sparse 1/8 with 8-token blocks (2K and 4K), the
# runs whose exact reference engine failed its CUDA-graph capture in call 2 (the graph's dequantized
# lm_head was not in the plan); now charged as graph scratch.
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
[ -f /tmp/smolpart_aa ] || { echo "no first half: call 3a did not run on this machine"; exit 3; }
cat /tmp/smolpart_aa .smolB/smolpart_ab > /tmp/smol.gguf && md5sum /tmp/smol.gguf
M=/tmp/smol.gguf; D=.devbench/s18/eval_drv.py; mkdir -p /tmp/ev; date -u
B="dtype=float32 block_size=8 vram_budget_bytes=6000000000"
export EVAL_TASKS=
for L in 2048 4096; do ( timeout 330 python3 $D $M /tmp/ev/tf-sparse8-$L "sparse 1/8" $L 256 1 1 $B cold_attention=sparse sparse_budget_tokens=$((L / 8)) > /tmp/ev/tf-sparse8-$L.log 2>&1; echo "== tf $L rc=$? $(date -u +%T)" ) & done
wait; date -u
for f in /tmp/ev/*.log; do echo "-- $f"; grep -E "@|done|Error|error|KV pool|graph" $f | grep -v -i warn | tail -8 | cut -c1-300; done
(cd /tmp && tar czf $OUT/tf.tgz ev)
