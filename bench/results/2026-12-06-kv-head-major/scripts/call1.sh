#!/usr/bin/env bash
# Call 1 (prepared 2026-12-06 22:40 UTC, not run): attn_layout.py, decode attention alone on the
# pool's layout against head-major blocks, W1 and 8B shapes at 1 x 8K, 8 / 32 x 2K. Any card;
# carry .whl (only for the prelude's path). About 120 s on a fresh machine (the compiles).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call1
timeout 220 python3 bench/results/2026-12-06-kv-head-major/scripts/attn_layout.py $OUT/attn_layout.json 2>&1 | tee -a $L
echo "call 1 done at $(( $(date +%s) - T0 )) s" | tee -a $L
