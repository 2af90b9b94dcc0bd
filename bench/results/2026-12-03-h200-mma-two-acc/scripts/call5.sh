#!/usr/bin/env bash
# Call 5: 16 x 2K on the landed table (its 9-16-token entries back to the old configs).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{ date -u; git log --oneline | head -1; } | tee -a $OUT/call5.log
timeout 100 python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --ctx 2048 --steps 100 --concurrency 16 --kv-cache-memory 8GiB > $OUT/p_new_c16.txt 2>&1
echo "rc $? new c16: $(grep engine.step $OUT/p_new_c16.txt)" | tee -a $OUT/call5.log
