#!/usr/bin/env bash
# Any card, about 520 s (prepared 2026-12-07 05:00 UTC; carry .whl). Part A: the norm handoff
# (KVSPILL_NORM_HANDOFF=1, kernels/norm_handoff.NormHandoff, in the working tree) against today's
# form at batch 1, 8K: W1 and the 8B bf16 (separate kernels today), the 8B fp8 (fused, norms in
# the prologue today) and the random 8B Q4_K_M (separate kernels today), alternated twice; its
# GPU tests. Part B, if time is left: ablate.py's upper bounds (norms, merge left out).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh handoff
A=bench/results/2026-12-07-fixed-kernels/scripts/ablate.py
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
run() {  # run NAME LIMIT ENV ABLATE ARGS...
  local name=$1 lim=$2 envs=$3 abl=$4; shift 4
  left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
  env $envs ABLATE=$abl timeout 90 python3 $A "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step' $OUT/$name.txt | tr -s ' ' | cut -c1-80)" | tee -a $L
}
W="--shape llama-1b --steps 200 --kv-cache-memory 8GiB --ctx 8192"
B="--shape llama-8b --steps 100 --kv-cache-memory 8GiB --ctx 8192"
F="--shape llama-8b:fp8 --steps 100 --kv-cache-memory 8GiB --ctx 8192"
Q="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 16GiB --ctx 8192"
if [ "${SHORT:-0}" = 2 ]; then  # about 200 s left: Q4_K_M and W1, off / on, Q4_K_M again
  for s in Q W Q; do
    run ${s}_off 180 KVSPILL_NORM_HANDOFF=0 "" ${!s}
    run ${s}_on 180 KVSPILL_NORM_HANDOFF=1 "" ${!s}
  done
  exit 0
fi
if [ "${SHORT:-0}" = 1 ]; then  # less than 600 s of device time left: Part A without the 8B bf16
  for r in a b; do
    for s in Q W F; do
      run ${s}_off_$r 300 KVSPILL_NORM_HANDOFF=0 "" ${!s}
      run ${s}_on_$r 300 KVSPILL_NORM_HANDOFF=1 "" ${!s}
    done
  done
  left 330 && { KVSPILL_NORM_HANDOFF=1 timeout 70 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py -k "fused or handoff" > $OUT/gpu_tests.txt 2>&1; echo "gpu tests (handoff on) rc $?: $(tail -1 $OUT/gpu_tests.txt)" | tee -a $L; }
  exit 0
fi
for r in a b; do
  for s in Q W F B; do
    run ${s}_off_$r 400 KVSPILL_NORM_HANDOFF=0 "" ${!s}
    run ${s}_on_$r 400 KVSPILL_NORM_HANDOFF=1 "" ${!s}
  done
done
left 440 && { KVSPILL_NORM_HANDOFF=1 timeout 90 python3 -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py -k "fused or handoff" > $OUT/gpu_tests.txt 2>&1; echo "gpu tests (handoff on) rc $?: $(tail -1 $OUT/gpu_tests.txt)" | tee -a $L; }
for v in "" norm merge; do run W_abl_${v:-base} 500 "" "$v" $W; done
for v in "" norm; do run Q_abl_${v:-base} 540 "" "$v" $Q; done
(cd $OUT && tar czf handoff.tgz *.txt && rm -f *.txt)
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
