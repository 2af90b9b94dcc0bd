#!/usr/bin/env bash
# Call 1: llama.cpp's build and the llama-quantize Q4_K_M file in the background (niced; the build
# packed into $OUT for later sessions); on the GPU the merge change (merge_switch.diff: OLD / WHOLE /
# the new default) in the kernel tests, alone (merge_ab.py) and in the engine, alternated.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call1
N=bench/results/2026-12-05-h100-merge-defaults/scripts
(nice -n 19 bash .peer/llamacpp_peer.sh build > /tmp/build.log 2>&1; echo "build done at $(( $(date +%s) - T0 )) s" >> /tmp/build.log
 SHAPE=8b QUANT=Q4_K_M nice -n 10 bash .peer/llamacpp_peer.sh model >> /tmp/build.log 2>&1; echo "model done at $(( $(date +%s) - T0 )) s" >> /tmp/build.log) &
git apply $N/merge_switch.diff && echo "merge_switch.diff applied" | tee -a $L
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_decode_attention.py tests/runner/test_attention_rope_decode.py > $OUT/pytest.txt 2>&1
echo "pytest rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest.txt)" | tee -a $L
timeout 90 python3 $N/merge_ab.py 2>&1 | tee -a $L
timeout 60 python3 $N/probe_splitk.py 2>&1 | tee -a $L
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
run() {  # name, limit, env..., -- profile_decode args
  local name=$1 lim=$2; shift 2; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  left $lim || { echo "$name skipped (time)" | tee -a $L; return; }
  timeout 100 env "${envs[@]}" python3 -m kvspill.bench.profile_decode "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-200)" | tee -a $L
}
B="--shape llama-8b:q4_k_m --steps 100"
K8="$B --kv-cache-memory 16GiB --ctx 8192"
run k8_new_a 300 X=1 -- $K8
run k8_old_a 330 KVSPILL_MERGE_OLD=1 -- $K8
run k8_new_b 355 X=1 -- $K8
run k8_old_b 380 KVSPILL_MERGE_OLD=1 -- $K8
run k32_new 405 X=1 -- $B --kv-cache-memory 16GiB --ctx 32768
run k32_old 430 KVSPILL_MERGE_OLD=1 -- $B --kv-cache-memory 16GiB --ctx 32768
run w1_new 450 X=1 -- --shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192
run w1_old 470 KVSPILL_MERGE_OLD=1 -- --shape llama-1b --steps 100 --kv-cache-memory 16GiB --ctx 8192
run c32_new 490 X=1 -- $B --kv-cache-memory 16GiB --ctx 2048 --concurrency 32
run c32_old 510 KVSPILL_MERGE_OLD=1 -- $B --kv-cache-memory 16GiB --ctx 2048 --concurrency 32
while ! grep -q "model done" /tmp/build.log && [ $(( $(date +%s) - T0 )) -lt 545 ]; do sleep 5; done
tail -4 /tmp/build.log | tee -a $L; ls -la /tmp/l8b*.gguf 2>&1 | tee -a $L
if grep -q "build done" /tmp/build.log; then
  (cd /tmp/lcpp-build && strip --strip-unneeded bin/*.so* bin/llama-* 2>/dev/null; tar cf - bin | xz -T16 -4 > /tmp/lcpp-bin.txz)
  ls -la /tmp/lcpp-bin.txz | tee -a $L
  split -b 15m -d /tmp/lcpp-bin.txz $OUT/lcpp-bin.txz.
fi
git checkout -q kvspill
(cd $OUT && tar czf all1.tgz *.txt && rm -f *.txt)
echo "call 1 done at $(( $(date +%s) - T0 )) s" | tee -a $L
