"""Prefix each stdin line with the seconds since START (env), for start-up timelines."""
import os, sys, time
start = float(os.environ["START"])
for line in sys.stdin:
    if "GET /health" in line:
        continue
    sys.stdout.write(f"{time.time() - start:7.2f} {line}")
    sys.stdout.flush()
