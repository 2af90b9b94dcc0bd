#!/usr/bin/env bash
# Call 16 (2026-12-05): the defaults landed from calls 12, 14 and 15 (dense / fp8 one-token tiles,
# Q4_1's tensor-core entries, Q8_0's int16-x lanes on with their table) on the card, each against
# the path it replaced on the same machine, alternated: GPU tests, then 8B fp8 / bf16 and W1 at 8K
# (old tiles: DENSE_PICKS=old_dense_tiles.json), random 8B Q8_0 at 8K (KVSPILL_Q80_INT16X=0), random
# 8B Q4_1 at 8 and 32 x 2K (KVSPILL_MMA_CONFIGS=no_q41_mma.json).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call16
S=bench/results/2026-12-05-h200-q41-configs/scripts
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_fp8_gemv.py tests/kernels/test_gguf_int16x.py tests/kernels/test_gguf_mma.py -k "dense or fp8 or q80 or q41 or dispatch" > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
row() {  # name variant rep env... -- profile args...
  local name=$1 v=$2 r=$3; shift 3
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  timeout 90 env "${envs[@]}" python3 $S/prof_dense_picks.py "$@" --steps 100 > $OUT/${name}_${v}_$r.txt 2>&1
  echo "$name $v $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/${name}_${v}_$r.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $L
}
for r in a b; do
  for v in new old; do
    left 540 || break 2
    d=; q8=1; mma=; [ $v = old ] && { d=$S/old_dense_tiles.json; q8=0; mma=$S/no_q41_mma.json; }
    row fp8 $v $r DENSE_PICKS=$d -- --shape llama-8b:fp8 --kv-cache-memory 8GiB --ctx 8192
    row bf16 $v $r DENSE_PICKS=$d -- --shape llama-8b --kv-cache-memory 8GiB --ctx 8192
    row w1 $v $r DENSE_PICKS=$d -- --shape llama-1b --kv-cache-memory 16GiB --ctx 8192
    row q8 $v $r KVSPILL_Q80_INT16X=$q8 -- --shape llama-8b:q8_0 --kv-cache-memory 16GiB --ctx 8192
    row q41x8 $v $r KVSPILL_MMA_CONFIGS=$mma -- --shape llama-8b:q4_1 --kv-cache-memory 16GiB --ctx 2048 --concurrency 8
    row q41x32 $v $r KVSPILL_MMA_CONFIGS=$mma -- --shape llama-8b:q4_1 --kv-cache-memory 16GiB --ctx 2048 --concurrency 32
  done
done
(cd $OUT && tar czf all16.tgz *.txt && rm -f *.txt)
echo "call 16 done at $(( $(date +%s) - T0 )) s" | tee -a $L
