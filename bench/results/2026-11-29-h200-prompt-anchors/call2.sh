#!/usr/bin/env bash
# Session 22, call 2 (same machine as call 1): SmolLM2 (fp32, 256 hot tokens) code task at 2K, 120 samples,
# seeds 0-2: exact, sparse 1/8 (8-token blocks) without and with prompt anchors (window 32, share 0.5), and
# 16-token blocks with anchors; the other tasks at 2K/4K/8K with anchors (16-token blocks). 16 evals at once.
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
[ -f /tmp/smolpart_aa ] || { echo "no first half: call 1 did not run on this machine"; exit 3; }
cat /tmp/smolpart_aa .smolB/smolpart_ab > /tmp/smol.gguf && md5sum /tmp/smol.gguf
M=/tmp/smol.gguf; D=.devbench/s22/eval_drv.py; mkdir -p /tmp/ev; date -u; python3 -V
B="dtype=float32 vram_budget_bytes=5000000000"
A="sparse_prompt_window=32 sparse_prompt_share=0.5"
ev() { name=$1; shift; ( timeout 540 python3 $D $M /tmp/ev/$name "$@" > /tmp/ev/$name.log 2>&1; echo "== $name rc=$? $(date -u +%T)" >> /tmp/ev/done.txt ) & }
export EVAL_TASKS=code
for s in 0 1 2; do
  export EVAL_SEED=$s
  ev code-exact-s$s exact 2048 256 120 0 $B block_size=8 cold_attention=stream
  ev code-plain8-s$s "sparse 1/8 bs8" 2048 256 120 0 $B block_size=8 cold_attention=sparse sparse_budget_tokens=256
  ev code-anchor8-s$s "sparse 1/8 bs8 +prompt" 2048 256 120 0 $B block_size=8 cold_attention=sparse sparse_budget_tokens=256 $A
  ev code-anchor16-s$s "sparse 1/8 bs16 +prompt" 2048 256 120 0 $B cold_attention=sparse sparse_budget_tokens=256 $A
done
export EVAL_SEED=0
ev code-plain16-s0 "sparse 1/8 bs16" 2048 256 120 0 $B cold_attention=sparse sparse_budget_tokens=256
export EVAL_TASKS=passkey,niah_multikey,variable_tracking,common_words
for L in 2048 4096 8192; do n=20; [ $L = 8192 ] && n=10
  ev other-anchor16-$L "sparse 1/8 bs16 +prompt" $L 256 $n 0 $B cold_attention=sparse sparse_budget_tokens=$((L / 8)) $A
done
while [ $(jobs -r | wc -l) -gt 0 ] && [ $(( $(date +%s) - T0 )) -lt 565 ]; do sleep 10; (cd /tmp && tar czf $OUT/eval.tgz ev); done
cat /tmp/ev/done.txt; date -u
for f in /tmp/ev/*.log; do echo "-- $f"; grep -E "@|done|Error|error" $f | tail -4; done
(cd /tmp && tar czf $OUT/eval.tgz ev)
