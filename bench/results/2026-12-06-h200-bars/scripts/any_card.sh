#!/usr/bin/env bash
# Any card (prepared 2026-12-06 18:30 UTC): with device starts scarce, one script for whatever
# machine comes. An H200: call1.sh (issue 54's bars with llama.cpp; carry .whl and .peer-bin).
# Another card: ../../2026-12-06-mixed-qkv/scripts/call4.sh (GGUF fused decode A/B; its call 3 ran
# here at 18:47 UTC and is done). Files go to $OUT/<call>/.
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash bench/results/2026-12-06-h200-bars/scripts/call1.sh
fi
OUT0=$OUT; mkdir -p $OUT0/call4
OUT=$OUT0/call4 exec bash bench/results/2026-12-06-mixed-qkv/scripts/call4.sh
