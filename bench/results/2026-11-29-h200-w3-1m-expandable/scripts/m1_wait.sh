#!/usr/bin/env bash
# Wait for the background 1M job (until $1 seconds of this call), then copy what it wrote to $OUT.
while [ ! -f /tmp/m1/done ] && [ $SECONDS -lt ${1:-570} ]; do sleep 5; done
date -u; tail -2 /tmp/m1/samples.txt 2>/dev/null; tail -c 1500 /tmp/m1/w3_1m.log 2>/dev/null
[ -f /tmp/m1/done ] && echo JOB_DONE || echo JOB_RUNNING
python3 - <<'PY'
import re
peak = (0, "")
for line in open("/tmp/m1/samples.txt"):
    m = re.search(r"gpu_used_mib,util=(\d+)", line)
    if m and int(m.group(1)) > peak[0]:
        peak = (int(m.group(1)), line.strip())
print("card peak so far:", peak[0], "MiB =", round(peak[0] / 1024, 2), "GiB |", peak[1])
PY
cp /tmp/m1/* "$OUT"/ 2>/dev/null; true
