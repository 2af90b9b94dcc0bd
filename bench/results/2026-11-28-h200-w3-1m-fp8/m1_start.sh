#!/usr/bin/env bash
# Session 16, call 1: install, copy the tree to /tmp/kvs1m (the job must not see later syncs of
# the working tree), start the 1M-token W3 fp8 row in the background, then wait like m1_wait.sh.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; free -g | head -2
rm -rf /tmp/kvs1m /tmp/m1; mkdir -p /tmp/m1; cp -r "$PWD" /tmp/kvs1m
setsid nohup bash /tmp/kvs1m/.devbench/s16/m1_job.sh > /tmp/m1/driver.log 2>&1 < /dev/null &
setsid nohup bash /tmp/kvs1m/.devbench/s16/m1_sampler.sh > /dev/null 2>&1 < /dev/null &
sleep 5
bash .devbench/s16/m1_wait.sh 530
