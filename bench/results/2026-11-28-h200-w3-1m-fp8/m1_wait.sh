#!/usr/bin/env bash
# Wait for the background 1M job (at most ~570 s of this call), then copy what it wrote to $OUT.
while [ ! -f /tmp/m1/done ] && [ $SECONDS -lt ${1:-570} ]; do sleep 5; done
date -u; tail -3 /tmp/m1/samples.txt 2>/dev/null; tail -c 1500 /tmp/m1/w3_1m.log 2>/dev/null
[ -f /tmp/m1/done ] && echo JOB_DONE || echo JOB_RUNNING
cp /tmp/m1/* "$OUT"/ 2>/dev/null; true
