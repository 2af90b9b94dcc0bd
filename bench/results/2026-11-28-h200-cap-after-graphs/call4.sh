#!/usr/bin/env bash
# Session 19, call 4 (same machine as call 3): teacher-forced agreement at sparse 1/8 with 8-token
# blocks (the reference engine: capture failed twice, then the cap before the runner's buffers); the code task
# at 2K (120 samples): the shared list (eager, checks perhead.py against call 2's engine) and per-kv-head lists.
set -u
T0=$(date +%s)
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
[ -f /tmp/smolpart_aa ] || { echo "no first half: call 1 did not run on this machine"; exit 3; }
cat /tmp/smolpart_aa .smolB/smolpart_ab > /tmp/smol.gguf && md5sum /tmp/smol.gguf
M=/tmp/smol.gguf; D=.devbench/s19/eval_drv.py; P=.devbench/s19/perhead.py; mkdir -p /tmp/ev; date -u; python3 -V
ev() { name=$1; shift; ( timeout 480 python3 "$@" > /tmp/ev/$name.log 2>&1; echo "== $name rc=$? $(date -u +%T)" >> /tmp/ev/done.txt ) & }
B8="dtype=float32 block_size=8 vram_budget_bytes=6000000000"
export EVAL_TASKS=
for L in 2048; do ev tf-bs8-sparse8-$L $D $M /tmp/ev/tf-bs8-sparse8-$L "sparse 1/8" $L 256 1 1 $B8 cold_attention=sparse sparse_budget_tokens=$((L / 8)); done
export EVAL_TASKS=code
B="dtype=float32 vram_budget_bytes=6000000000"
E="enforce_eager=true sparse_cache_seqs=0 cold_attention=sparse"
SPARSE_LISTS=shared ev code-shared8 $P $D $M /tmp/ev/code-shared8 "shared 1/8" 2048 256 120 0 $B $E sparse_budget_tokens=256
SPARSE_LISTS=perhead ev code-perhead8 $P $D $M /tmp/ev/code-perhead8 "per-head 1/8" 2048 256 120 0 $B $E sparse_budget_tokens=256
SPARSE_LISTS=perhead ev code-perhead4 $P $D $M /tmp/ev/code-perhead4 "per-head 1/4" 2048 256 120 0 $B $E sparse_budget_tokens=512
SPARSE_LISTS=perhead ev code-perhead8-bs8 $P $D $M /tmp/ev/code-perhead8-bs8 "per-head 1/8 bs8" 2048 256 120 0 $B8 $E sparse_budget_tokens=256
while [ $(jobs -r | wc -l) -gt 0 ] && [ $(( $(date +%s) - T0 )) -lt 495 ]; do sleep 10; done
cat /tmp/ev/done.txt; date -u
for f in /tmp/ev/*.log; do echo "-- $f"; grep -E "@|done|Error|error|lists|agree" $f | grep -v -i warn | tail -6 | cut -c1-250; done
(cd /tmp && tar czf $OUT/eval.tgz ev)
