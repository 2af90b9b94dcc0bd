#!/usr/bin/env bash
# Call 3 (prepared 2026-12-06 17:25 UTC, not run): why call 2's one tensor-core launch for the
# mixed qkv was 6% faster alone and 1.4% slower in the 8 x 2K step. mixed_mma.diff applied to the
# machine's copy of the tree (KVSPILL_MIXED_MMA switches it), then the step's kernel table
# (torch.profiler, 14 steps) with it on and off, PDL on and off, and the plain A/B again.
# Carry .whl. About 200 s.
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call3
. bench/results/2026-12-06-h100-gated-down/scripts/prof.sh
git apply --exclude="docs/*" --exclude="tests/kernels/*sm90_compile.py" bench/results/2026-12-06-mixed-qkv/scripts/mixed_mma.diff || { echo "mixed_mma.diff did not apply" | tee -a $L; exit 3; }
OUTR=$OUT; mkdir -p $OUTR/runs; OUT=$OUTR/runs
C="--shape llama-8b:q4_k_m --steps 100 --kv-cache-memory 12GiB --ctx 2048 --concurrency 8"
prof c8_on_tab 120 X=1 -- $C --kernels 14
prof c8_off_tab 150 KVSPILL_MIXED_MMA=0 -- $C --kernels 14
prof c8_on_pdl0 180 KVSPILL_PDL=0 -- $C --kernels 14
prof c8_off_pdl0 210 KVSPILL_PDL=0 KVSPILL_MIXED_MMA=0 -- $C --kernels 14
prof c8_on 240 X=1 -- $C
prof c8_off 260 KVSPILL_MIXED_MMA=0 -- $C
for f in $OUT/c8_*_tab.txt $OUT/c8_*_pdl0.txt; do echo "== $f"; grep -E "mma|words_x|rms|split|merge" $f | tr -s ' ' | cut -c1-160; done | tee -a $L
OUT=$OUTR; tar czf $OUT/runs.tgz -C $OUT runs && rm -rf $OUT/runs
echo "call 3 done at $(( $(date +%s) - T0 )) s" | tee -a $L
