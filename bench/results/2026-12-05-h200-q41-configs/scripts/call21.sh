#!/usr/bin/env bash
# Call 21 (prepared 2026-12-05, not run): on an H200, the dense / fp8 one-token tiles as committed
# (swept on an H100 in call 12) against the H200's old tiles (old_dense_tiles.json) and against a
# sweep on this card (dense_sweep.py's picks), alternated: 8B fp8 and bf16 at 8K, W1 at 8K.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call21
S=bench/results/2026-12-05-h200-q41-configs/scripts
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || echo "not an H200: the rows compare with call 16's H100 rows only" | tee -a $L
timeout 230 python3 $S/dense_sweep.py $OUT 2>&1 | tail -14 | tee -a $L
for r in a b; do
  for v in committed old pick; do
    for row in "fp8 --shape llama-8b:fp8 --kv-cache-memory 8GiB" "bf16 --shape llama-8b --kv-cache-memory 8GiB" "w1 --shape llama-1b --kv-cache-memory 16GiB"; do
      set -- $row; name=$1; shift
      left 560 || break 3
      p=; [ $v = old ] && p=$S/old_dense_tiles.json; [ $v = pick ] && p=$OUT/dense_picks.json
      timeout 60 env DENSE_PICKS=$p python3 $S/prof_dense_picks.py "$@" --steps 100 --ctx 8192 > $OUT/${name}_${v}_$r.txt 2>&1
      echo "$name $v $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/${name}_${v}_$r.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
    done
  done
done
(cd $OUT && tar czf all21.tgz *.txt && rm -f *.txt)
echo "call 21 done at $(( $(date +%s) - T0 )) s" | tee -a $L
