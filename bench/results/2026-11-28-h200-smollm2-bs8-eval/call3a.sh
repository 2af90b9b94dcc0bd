#!/usr/bin/env bash
# Session 18, call 3a: only leaves half of the SmolLM2 GGUF in /tmp for call 3b.
cp .smolA/smolpart_aa /tmp/smolpart_aa && ls -la /tmp/smolpart_aa; nvidia-smi --query-gpu=name --format=csv,noheader; date -u
