#!/usr/bin/env bash
# Session 21, call 3 (same machine): wait for the 1M job, then the fault-(e) check: teacher-forced
# agreement at sparse 1/8 with 8-token blocks (SmolLM2 fp32, eval's 6 GB budget), start-up memory probed.
set -u
T0=$(date +%s)
bash .devbench/s21/m1_wait.sh ${1:-420}
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
if [ -f /tmp/smolpart_aa ] && [ -f /tmp/smolpart_ab ]; then
  cat /tmp/smolpart_aa /tmp/smolpart_ab > /tmp/smol.gguf && md5sum /tmp/smol.gguf
else echo "GGUF halves missing"; ls /tmp/smolpart*; exit 3; fi
left=$(( 560 - ($(date +%s) - T0) )); echo "eval time left: $left s"
[ $left -lt 60 ] && exit 0
M=/tmp/smol.gguf; P=.devbench/s21/probe.py; mkdir -p /tmp/ev; date -u
B8="dtype=float32 block_size=8 vram_budget_bytes=6000000000"
for L in 2048 4096; do
  ( EVAL_TASKS= timeout $left python3 $P $M /tmp/ev/tf-bs8-sparse8-$L "sparse 1/8 bs8" $L 256 1 1 $B8 cold_attention=sparse sparse_budget_tokens=$((L / 8)) > /tmp/ev/tf-$L.log 2>&1; echo "== $L rc=$? $(date -u +%T)" >> /tmp/ev/done.txt ) &
done
wait; cat /tmp/ev/done.txt; date -u
for L in 2048 4096; do echo "-- $L"; grep -E "probe|over the|KV pool|teacher|done|Error|error" /tmp/ev/tf-$L.log | cut -c1-300 | tail -30; done
(cd /tmp && tar czf $OUT/eval.tgz ev)
