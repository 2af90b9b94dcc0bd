#!/usr/bin/env bash
# The W3 / W5 rows on issue 54's code beside the code before it (dad9dea, 2026-12-02 13:03, the
# parent of its first kernel commit), alternated on one card: "no row of docs/performance.md gets
# slower" checked on whatever card comes. Carry .whl (ab.sh makes the old tree); about 550 s.
set -u
. bench/results/2026-12-07-rows-regress/scripts/ab.sh rows_ab
A="--shape llama-8b --vram-budget 24GiB --cpu-kv-budget 40GiB --new-tokens 32"
W5="--shape llama-8b --vram-budget 24GiB --cpu-kv-budget 18GiB --ctx 131072 --new-tokens 32 --cold-attention sparse --sparse-budget-tokens 4096"
run 80 . new-w3-32k $A --ctx 32768
run 80 $OLD old-w3-32k $A --ctx 32768
run 110 $OLD old-w5-sparse $W5
run 110 . new-w5-sparse $W5
run 90 . new-w3-split $A --ctx 131072 --cold-attention split
run 90 $OLD old-w3-split $A --ctx 131072 --cold-attention split
rows_done
echo "rows_ab done at $(( $(date +%s) - T0 )) s" | tee -a $L
