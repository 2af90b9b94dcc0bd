#!/usr/bin/env bash
# Call 8 (2026-12-06 13:34 UTC, the command as run after call 7 on the same machine, whose /tmp/q6s
# it reuses): the Q6_K scale loads at 4 and 2 sequences of 2K against today's, 4 twice.
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call8; . bench/results/2026-12-06-h100-words-one-dot/scripts/prof_tree.sh; OUTR=$OUT; mkdir -p $OUT/runs; OUT=$OUT/runs; A="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency"; for n in 4 2; do prof c${n}_today 150 PYTHONPATH=/tmp/site:$PWD -- $A $n; prof c${n}_q6s 150 PYTHONPATH=/tmp/site:/tmp/q6s -- $A $n; done; prof c4_today_2 170 PYTHONPATH=/tmp/site:$PWD -- $A 4; prof c4_q6s_2 170 PYTHONPATH=/tmp/site:/tmp/q6s -- $A 4; OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
