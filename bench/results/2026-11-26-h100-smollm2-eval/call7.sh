#!/usr/bin/env bash
# Dev only: SmolLM2 sparse 1/8 with teacher forcing (one token per step) at 2K/4K/8K.
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
cat /tmp/smolpart_aa .smolB/smolpart_ab > /tmp/smol.gguf && md5sum /tmp/smol.gguf
M=/tmp/smol.gguf; D=.devbench/eval_drv.py; mkdir -p /tmp/ev
nvidia-smi --query-gpu=name --format=csv,noheader; date -u
ev() { name=$1; lim=$2; shift 2; timeout $lim python3 $D $M /tmp/ev/$name "$@" > /tmp/ev/$name.log 2>&1; echo "== $name rc=$? $(date -u +%T)"; grep -E "@|done|Error|error" /tmp/ev/$name.log | tail -8; (cd /tmp && tar czf $OUT/eval.tgz ev); }
export EVAL_TASKS=passkey,niah_multikey
ev exact-8k 70 exact 8192 256 5 0 dtype=float32 cold_attention=stream
ev sparse8-2k 110 "sparse 1/8" 2048 256 5 1 dtype=float32 cold_attention=sparse sparse_budget_tokens=256
ev sparse8-4k 150 "sparse 1/8" 4096 256 5 1 dtype=float32 cold_attention=sparse sparse_budget_tokens=512
ev sparse8-8k 235 "sparse 1/8" 8192 256 5 1 dtype=float32 cold_attention=sparse sparse_budget_tokens=1024
date -u
