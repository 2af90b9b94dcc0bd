#!/usr/bin/env bash
# Session 21, call 1: install, copy the tree to /tmp/kvs1m, start the 1M-token W3 fp8 row (new cap)
# and a 2 s memory sampler in the background, keep the first GGUF half, then wait.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; free -g | head -2; git log --oneline -1 2>/dev/null
rm -rf /tmp/kvs1m /tmp/m1; mkdir -p /tmp/m1; cp -r "$PWD" /tmp/kvs1m
cp .smolA/smolpart_aa /tmp/smolpart_aa
setsid nohup bash /tmp/kvs1m/.devbench/s21/m1_job.sh > /tmp/m1/driver.log 2>&1 < /dev/null &
setsid nohup bash /tmp/kvs1m/.devbench/s21/m1_sampler.sh > /dev/null 2>&1 < /dev/null &
sleep 5
bash .devbench/s21/m1_wait.sh 560
