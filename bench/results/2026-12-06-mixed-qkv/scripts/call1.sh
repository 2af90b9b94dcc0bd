#!/usr/bin/env bash
# Call 1 (prepared 2026-12-06 17:20 UTC): the mixed qkv in one launch (kernels/gguf_gemv_mixed.py).
# GPU tests, then the kernel against its two launches with part B's configs (sweep_mixed.py), then
# random 8B Q4_K_M at 8K (and 32K, 1 x 2K) with the sweep's best against KVSPILL_MIXED_GEMV=0,
# alternated. Carry .whl. About 420 s.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call1
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
S2=bench/results/2026-12-06-mixed-qkv/scripts
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_gemv_mixed.py tests/engine/test_gpu.py -k "mixed" > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
timeout 150 python3 $S2/sweep_mixed.py Q4_K Q5_K > $OUT/sweep.jsonl 2> $OUT/sweep.err
echo "sweep rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L; cat $OUT/sweep.jsonl | tee -a $L
BEST=$(python3 -c "import json,sys; b=json.loads(open('$OUT/sweep.jsonl').read().splitlines()[-1])['best']['Q4_K']; print(b[0], b[1])" 2>/dev/null || echo "2048 4")
echo "engine config B at 4 warps: $BEST" | tee -a $L
profc() {  # NAME LIMIT -- ARGS: profile_decode with part B's best config at 4 warps
  local name=$1 lim=$2; shift 3
  left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
  timeout 100 python3 $S2/with_config.py 4 $BEST -- "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-200)" | tee -a $L
}
K8="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192"
K32="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 32768"
C1="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048"
profc k8_on 300 -- $K8
prof k8_off 330 KVSPILL_MIXED_GEMV=0 -- $K8
profc k8_on2 360 -- $K8
prof k8_off2 390 KVSPILL_MIXED_GEMV=0 -- $K8
profc k32_on 420 -- $K32
prof k32_off 450 KVSPILL_MIXED_GEMV=0 -- $K32
profc c1_on 480 -- $C1
prof c1_off 500 KVSPILL_MIXED_GEMV=0 -- $C1
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 1 done at $(( $(date +%s) - T0 )) s" | tee -a $L
