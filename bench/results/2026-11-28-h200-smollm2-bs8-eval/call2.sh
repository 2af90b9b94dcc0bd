#!/usr/bin/env bash
# Session 18, call 2 (same machine as call 1): SmolLM2 (fp32, 256 hot tokens) `kvspill eval` with
# 8-token blocks: exact (stream) against sparse 1/8 and 1/4 at 2K/4K/8K, every task, plus
# teacher-forced agreement at 1/8; 15 evals at once (one process each, one CPU thread each).
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
[ -f /tmp/smolpart_aa ] || { echo "no first half: call 1 did not run on this machine"; exit 3; }
cat /tmp/smolpart_aa .smolB/smolpart_ab > /tmp/smol.gguf && md5sum /tmp/smol.gguf
M=/tmp/smol.gguf; D=.devbench/s18/eval_drv.py; mkdir -p /tmp/ev; date -u; python3 -V
B="dtype=float32 block_size=8 vram_budget_bytes=6000000000"
ev() { name=$1; shift; ( timeout 530 python3 $D $M /tmp/ev/$name "$@" > /tmp/ev/$name.log 2>&1; echo "== $name rc=$? $(date -u +%T)" >> /tmp/ev/done.txt ) & }
for L in 2048 4096 8192; do
  b8=$((L / 8)); b4=$((L / 4)); n=20; [ $L = 8192 ] && n=10
  export EVAL_TASKS=passkey,niah_multikey,variable_tracking,common_words
  ev other-exact-$L exact $L 256 $n 0 $B cold_attention=stream
  ev other-sparse8-$L "sparse 1/8" $L 256 $n 0 $B cold_attention=sparse sparse_budget_tokens=$b8
  ev other-sparse4-$L "sparse 1/4" $L 256 $n 0 $B cold_attention=sparse sparse_budget_tokens=$b4
done
export EVAL_TASKS=code
ev code-exact-2048 exact 2048 256 120 0 $B cold_attention=stream
ev code-sparse8-2048 "sparse 1/8" 2048 256 120 0 $B cold_attention=sparse sparse_budget_tokens=256
ev code-sparse4-2048 "sparse 1/4" 2048 256 120 0 $B cold_attention=sparse sparse_budget_tokens=512
export EVAL_TASKS=
for L in 2048 4096 8192; do ev tf-sparse8-$L "sparse 1/8" $L 256 1 1 $B cold_attention=sparse sparse_budget_tokens=$((L / 8)); done
while [ $(jobs -r | wc -l) -gt 0 ] && [ $(( $(date +%s) - T0 )) -lt 560 ]; do sleep 10; (cd /tmp && tar czf $OUT/eval.tgz ev); done
cat /tmp/ev/done.txt; date -u
for f in /tmp/ev/*.log; do echo "-- $f"; grep -E "@|done|Error|error" $f | tail -12; done
(cd /tmp && tar czf $OUT/eval.tgz ev)
