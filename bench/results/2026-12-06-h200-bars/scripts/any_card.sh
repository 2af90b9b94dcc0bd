#!/usr/bin/env bash
# Any card (prepared 2026-12-06 18:50 UTC): with device starts scarce, one script for whatever
# machine comes. An H200: call1.sh (issue 54's bars with llama.cpp; carry .whl and .peer-bin).
# Another card: ../../2026-12-06-mixed-qkv/scripts/call4.sh (GGUF fused decode A/B), its diff
# reverted, then that folder's call3.sh (the batched mixed-qkv anomaly) where time is left. Each
# call's files go to $OUT/<call>/.
set -u
D=bench/results/2026-12-06-mixed-qkv/scripts
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash bench/results/2026-12-06-h200-bars/scripts/call1.sh
fi
T_ANY=$(date +%s); OUT0=$OUT
mkdir -p $OUT0/call4 $OUT0/call3
OUT=$OUT0/call4 bash $D/call4.sh
git apply -R --exclude="docs/*" $D/gguf_fused_decode.diff || { echo "call4's diff did not revert"; exit 3; }
[ $(( $(date +%s) - T_ANY )) -lt 320 ] || { echo "no time left for call 3"; exit 0; }
OUT=$OUT0/call3 bash $D/call3.sh
