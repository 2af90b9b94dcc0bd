#!/usr/bin/env bash
# Session 21, call 2 (same machine): keep the second GGUF half, wait for the 1M job.
set -u
[ -f /tmp/smolpart_aa ] || echo "no first half here: a new machine"
cp .smolB/smolpart_ab /tmp/smolpart_ab; ls -la /tmp/smolpart_a*
bash .devbench/s21/m1_wait.sh 585
