#!/usr/bin/env bash
# llama.cpp build, the random-weight Llama-3.1-8B f16 GGUF and its Q4_K_M by llama-quantize
# (written to a .part name and renamed when llama-quantize ends: a cut-off file is never taken).
set -u
S=.devbench/s32
PEER=.peer bash $S/llamacpp_peer.sh build 2>&1 | tail -1
SHAPE=8b PEER=.peer bash $S/llamacpp_peer.sh model 2>&1 | tail -1
if [ ! -f /tmp/l8b-Q4_K_M.gguf ]; then
  /tmp/lcpp-build/bin/llama-quantize /tmp/l8b.gguf /tmp/l8b-Q4_K_M.part Q4_K_M 16 > /tmp/quant.log 2>&1 \
    && mv /tmp/l8b-Q4_K_M.part /tmp/l8b-Q4_K_M.gguf
  tail -1 /tmp/quant.log
fi
ls -la /tmp/l8b-Q4_K_M.gguf
