#!/usr/bin/env bash
# Dev only: SmolLM2 (issue 13): code at 8K (10 samples; samples draw again when a draw asks nothing) and variable tracking / common words at 4K (10 samples), exact vs sparse 1/8.
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
cat /tmp/smolpart_aa .smolB/smolpart_ab > /tmp/smol.gguf && md5sum /tmp/smol.gguf
M=/tmp/smol.gguf; D=.devbench/eval_drv.py; rm -rf /tmp/ev; mkdir -p /tmp/ev
date -u
ev() { name=$1; lim=$2; shift 2; timeout $lim python3 $D $M /tmp/ev/$name "$@" > /tmp/ev/$name.log 2>&1; echo "== $name rc=$? $(date -u +%T)"; grep -E "@|done|Error|error" /tmp/ev/$name.log | tail -3; (cd /tmp && tar czf $OUT/eval.tgz ev); }
export EVAL_TASKS=code
ev code-sparse8-8k 90 "sparse 1/8" 8192 256 10 0 dtype=float32 cold_attention=sparse sparse_budget_tokens=1024
ev code-exact-8k 170 exact 8192 256 10 0 dtype=float32 cold_attention=stream
export EVAL_TASKS=variable_tracking,common_words
ev other-sparse8-4k 90 "sparse 1/8" 4096 256 10 0 dtype=float32 cold_attention=sparse sparse_budget_tokens=512
ev other-exact-4k 140 exact 4096 256 10 0 dtype=float32 cold_attention=stream
date -u
