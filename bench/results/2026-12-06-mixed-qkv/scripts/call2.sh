#!/usr/bin/env bash
# Call 2 (prepared 2026-12-06 17:15 UTC): the mixed qkv's one tensor-core launch at 3-32 tokens
# (kernels/gguf_mma_mixed.py). GPU tests (both mixed kernels, the MMA kernels after their bodies
# became functions, the engine's tokens), the kernel against its two launches with part B's configs
# (sweep_mma_mixed.py), then random 8B Q4_K_M N x 2K with the sweep's picks against
# KVSPILL_MIXED_MMA=0, alternated, and 1 x 2K for the 8-over-1 ratio. Carry .whl. About 420 s
# (cut to the session's last device time: the sweep at 8 and 32 tokens; 4 and 16 x 2K last).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call2
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
S2=bench/results/2026-12-06-mixed-qkv/scripts
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_mma_mixed.py tests/engine/test_gpu.py -k "mixed" > $OUT/pytest.txt 2>&1
echo "pytest mixed rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
timeout 170 python3 $S2/sweep_mma_mixed.py 8 32 > $OUT/sweep_mma.jsonl 2> $OUT/sweep_mma.err
echo "sweep rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L; grep -v '"form": "mixed"' $OUT/sweep_mma.jsonl | tee -a $L
python3 - $OUT/sweep_mma.jsonl > $OUT/picks.json <<'PY' || echo '{}' > $OUT/picks.json
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows[:-1]:
    if r["form"] == "mixed":
        print(r["tokens"], r["us"], r["bit_equal"], {k: v for k, v in r["config_b"].items() if k in ("block_n", "split_k", "two_acc", "num_warps")}, file=sys.stderr)
print(json.dumps(rows[-1]["best"]))
PY
echo "picks: $(cat $OUT/picks.json)" | tee -a $L
profm() {  # NAME LIMIT -- ARGS: profile_decode with the sweep's part-B picks
  local name=$1 lim=$2; shift 3
  left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
  timeout 100 python3 $S2/with_mma_configs.py $OUT/picks.json -- "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-200)" | tee -a $L
}
C="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048"
profm c8_on 240 -- $C --concurrency 8
prof c8_off 260 KVSPILL_MIXED_MMA=0 -- $C --concurrency 8
profm c8_on2 280 -- $C --concurrency 8
prof c8_off2 300 KVSPILL_MIXED_MMA=0 -- $C --concurrency 8
profm c1 320 -- $C
profm c32_on 340 -- $C --concurrency 32
prof c32_off 360 KVSPILL_MIXED_MMA=0 -- $C --concurrency 32
profm c16_on 375 -- $C --concurrency 16
prof c16_off 385 KVSPILL_MIXED_MMA=0 -- $C --concurrency 16
profm c4_on 395 -- $C --concurrency 4
prof c4_off 400 KVSPILL_MIXED_MMA=0 -- $C --concurrency 4
left 390 && { timeout 50 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_mma.py -k "words or dispatch or quant_linear_mma_path" > $OUT/pytest_mma.txt 2>&1; echo "pytest mma rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest_mma.txt)" | tee -a $L; }
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 2 done at $(( $(date +%s) - T0 )) s" | tee -a $L
