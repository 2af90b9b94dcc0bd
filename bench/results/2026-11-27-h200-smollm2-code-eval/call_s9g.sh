#!/usr/bin/env bash
# Dev only: SmolLM2 code task (issue 13): exact vs sparse 1/8 and 1/4 at 2K (40 samples) and 4K (20).
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
cat /tmp/smolpart_aa .smolB/smolpart_ab > /tmp/smol.gguf && md5sum /tmp/smol.gguf
M=/tmp/smol.gguf; D=.devbench/eval_drv.py; mkdir -p /tmp/ev
nvidia-smi --query-gpu=name --format=csv,noheader; python3 -V; date -u
ev() { name=$1; lim=$2; shift 2; timeout $lim python3 $D $M /tmp/ev/$name "$@" > /tmp/ev/$name.log 2>&1; echo "== $name rc=$? $(date -u +%T)"; grep -E "@|done|Error|error" /tmp/ev/$name.log | tail -3; (cd /tmp && tar czf $OUT/eval.tgz ev); }
export EVAL_TASKS=code
ev code-sparse8-2k 100 "sparse 1/8" 2048 256 40 0 dtype=float32 cold_attention=sparse sparse_budget_tokens=256
ev code-sparse8-4k 80 "sparse 1/8" 4096 256 20 0 dtype=float32 cold_attention=sparse sparse_budget_tokens=512
ev code-exact-2k 160 exact 2048 256 40 0 dtype=float32 cold_attention=stream
ev code-sparse4-2k 90 "sparse 1/4" 2048 256 40 0 dtype=float32 cold_attention=sparse sparse_budget_tokens=512
ev code-sparse4-4k 80 "sparse 1/4" 4096 256 20 0 dtype=float32 cold_attention=sparse sparse_budget_tokens=1024
date -u
