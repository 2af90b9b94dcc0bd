#!/usr/bin/env bash
# Call 6 (warm machine after callD.sh): the fewest-rows shapes against the table of call 5.
export PYTHONPATH=/tmp/site:$PWD
Q6SHAPES='{"l1b_v": [512, 2048], "v": [1024, 4096], "l1b_qkv": [3072, 2048], "r512_4096": [512, 4096]}' \
Q6CONFIGS='[[1024,1,1],[512,1,1],[256,2,1],[512,2,1],[1024,2,2],[2048,1,2],[2048,2,4],[4096,2,4]]' SWEEP_S=80 \
  timeout 120 python3 bench/results/2026-12-04-h200-q6k-side-by-side/scripts/q6sweep2.py $OUT
