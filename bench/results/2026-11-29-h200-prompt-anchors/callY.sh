#!/usr/bin/env bash
# Session 22, call Y (same machine as call X): SmolLM2 (fp32, 256 hot tokens, 8-token blocks): teacher-forced
# agreement of sparse 1/8 at 2K/4K/8K through the engine; the code task at 2K on seeds 3-4 (exact, sparse 1/8,
# sparse 1/8 with prompt anchors); the other tasks with anchors at 2K/4K/8K. 12 evals at once.
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
[ -f /tmp/smolpart_aa ] || { echo "no first half: call X did not run on this machine"; exit 3; }
cat /tmp/smolpart_aa .smolB/smolpart_ab > /tmp/smol.gguf && md5sum /tmp/smol.gguf
M=/tmp/smol.gguf; D=.devbench/s22/eval_drv.py; mkdir -p /tmp/ev; date -u
B="dtype=float32 vram_budget_bytes=5000000000 block_size=8"
A="sparse_prompt_window=32 sparse_prompt_share=0.5"
ev() { name=$1; shift; ( timeout 455 python3 $D $M /tmp/ev/$name "$@" > /tmp/ev/$name.log 2>&1; echo "== $name rc=$? $(date -u +%T)" >> /tmp/ev/done.txt ) & }
export EVAL_TASKS=
for L in 2048 4096 8192; do ev tf-plain8-$L "sparse 1/8 bs8" $L 256 1 1 $B cold_attention=sparse sparse_budget_tokens=$((L / 8)); done
export EVAL_TASKS=code
for s in 3 4; do
  export EVAL_SEED=$s
  ev code-exact-s$s exact 2048 256 120 0 $B cold_attention=stream
  ev code-plain8-s$s "sparse 1/8 bs8" 2048 256 120 0 $B cold_attention=sparse sparse_budget_tokens=256
  ev code-anchor8-s$s "sparse 1/8 bs8 +prompt" 2048 256 120 0 $B cold_attention=sparse sparse_budget_tokens=256 $A
done
export EVAL_SEED=0 EVAL_TASKS=passkey,niah_multikey,variable_tracking,common_words
for L in 2048 4096 8192; do n=20; [ $L = 8192 ] && n=10
  ev other-anchor8-$L "sparse 1/8 bs8 +prompt" $L 256 $n 0 $B cold_attention=sparse sparse_budget_tokens=$((L / 8)) $A
done
while [ $(jobs -r | wc -l) -gt 0 ] && [ $(( $(date +%s) - T0 )) -lt 470 ]; do sleep 10; (cd /tmp && tar czf $OUT/eval.tgz ev); done
cat /tmp/ev/done.txt; date -u
for f in /tmp/ev/*.log; do echo "-- $f"; grep -E "@|done|Error|error|agree|top-1" $f | tail -4; done
(cd /tmp && tar czf $OUT/eval.tgz ev)
