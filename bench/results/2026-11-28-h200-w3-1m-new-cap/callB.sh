#!/usr/bin/env bash
# Session 20, call B (same machine as A): fault (e) - the eval's teacher-forced reference engine
# under the late cap, 8-token blocks, sparse 1/8, with its start-up memory probed.
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
[ -f /tmp/smolpart_aa ] || { echo "no first half: a new machine"; exit 3; }
cat /tmp/smolpart_aa .smolB/smolpart_ab > /tmp/smol.gguf && md5sum /tmp/smol.gguf
M=/tmp/smol.gguf; P=.devbench/s20/probe.py; mkdir -p /tmp/ev; date -u
B8="dtype=float32 block_size=8 vram_budget_bytes=6000000000"
for L in 2048 4096; do
  ( EVAL_TASKS= timeout ${1:-240} python3 $P $M /tmp/ev/tf-bs8-sparse8-$L "sparse 1/8 bs8" $L 256 1 1 $B8 cold_attention=sparse sparse_budget_tokens=$((L / 8)) > /tmp/ev/tf-$L.log 2>&1; echo "== $L rc=$? $(date -u +%T)" >> /tmp/ev/done.txt ) &
done
wait; cat /tmp/ev/done.txt; date -u
for L in 2048 4096; do echo "-- $L"; grep -E "probe|over the|KV pool|teacher|done|Error|error" /tmp/ev/tf-$L.log | cut -c1-300 | tail -30; done
(cd /tmp && tar czf $OUT/eval.tgz ev)
