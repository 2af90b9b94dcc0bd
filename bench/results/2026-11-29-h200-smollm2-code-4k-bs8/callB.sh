#!/usr/bin/env bash
# Session 25, call B (same machine as call A): the code task at 4K, exact (stream) against sparse 1/8 with
# 8-token blocks (the default the block-size rule picks for a 512-token budget), 6 seeds x 30 samples each.
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
[ -f /tmp/smolpart_aa ] || { echo "no first half: call A did not run on this machine"; exit 3; }
cat /tmp/smolpart_aa .smolB/smolpart_ab > /tmp/smol.gguf && md5sum /tmp/smol.gguf
M=/tmp/smol.gguf; D=.devbench/s22/eval_drv.py; mkdir -p /tmp/ev; date -u; python3 -V
B="dtype=float32 block_size=8 vram_budget_bytes=6000000000"
ev() { name=$1; shift; ( timeout 420 python3 $D $M /tmp/ev/$name "$@" > /tmp/ev/$name.log 2>&1; echo "== $name rc=$? $(date -u +%T)" >> /tmp/ev/done.txt ) & }
export EVAL_TASKS=code
for s in 0 1 2 3 4 5; do
  export EVAL_SEED=$s
  ev code-exact-4096-s$s exact 4096 256 30 0 $B cold_attention=stream
  ev code-sparse8-4096-s$s "sparse 1/8" 4096 256 30 0 $B cold_attention=sparse sparse_budget_tokens=512
done
while [ $(jobs -r | wc -l) -gt 0 ] && [ $(( $(date +%s) - T0 )) -lt 450 ]; do sleep 10; (cd /tmp && tar czf $OUT/eval.tgz ev); done
cat /tmp/ev/done.txt; date -u
for f in /tmp/ev/*.log; do echo "-- $f"; grep -E "@|done|Error|error" $f | tail -3; done
(cd /tmp && tar czf $OUT/eval.tgz ev)
