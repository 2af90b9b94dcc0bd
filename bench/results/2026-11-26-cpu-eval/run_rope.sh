#!/bin/sh
# RoPE extension on the embedded SmolLM2-135M-Instruct (8192 positions trained), CPU, fp32:
# passkey at 10K (1.25x), one sample each (what the loaded 2-core machine could do in the time),
# no scaling (positions opened up by a factor-1 linear scaling) beside yarn:2. The two runs ran
# at the same time on 2026-11-26 (with PYTHONPATH at the worktree and the venv on PATH).
set -e
cd "$(dirname "$0")"
kvspill() { python -m kvspill "$@"; }
kvspill eval --lengths 10K --tasks passkey --samples 1 --no-teacher-forced --device cpu --dtype float32 \
  --rope-scaling '{"rope_type": "linear", "factor": 1.0, "max_position_embeddings": 16384}' \
  --label "no scaling" --out rope-none
kvspill eval --lengths 10K --tasks passkey --samples 1 --no-teacher-forced --device cpu --dtype float32 \
  --rope-scaling yarn:2 --label "yarn:2" --out rope-yarn2
kvspill eval --combine rope-none --combine rope-yarn2 --out rope
