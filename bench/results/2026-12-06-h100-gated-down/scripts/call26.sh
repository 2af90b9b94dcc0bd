#!/usr/bin/env bash
# Call 26 (prepared 2026-12-06 01:30 UTC): decode attention's knobs in the engine on the card
# (attn_knobs.diff: KVSPILL_ATTN_STAGES, KVSPILL_ATTN_SPLITS; experiment only, applied here):
# stage 1 with three pipeline stages at 8-32 x 2K (10% faster alone at 32 x 2K on an H200,
# bench/results/2026-12-05-h200-attn-splits), 64 splits at 8K batch 1 (66 by the rule: two empty
# splits and a 128-wide merge), alternated; then call 25's rows (Q4_K lane passes, landed defaults).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call26
git apply bench/results/2026-12-06-h100-gated-down/scripts/attn_knobs.diff && echo "attn_knobs.diff applied" | tee -a $L
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
prof() {  # name, env..., -- profile_decode args
  local name=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  left ${LIMIT:-540} || { echo "$name skipped (time)" | tee -a $L; return; }
  timeout 60 env "${envs[@]}" python3 -m kvspill.bench.profile_decode --shape llama-8b:q4_k_m --steps 100 "$@" > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'engine.step|plan ' $OUT/$name.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-160)" | tee -a $L
}
B="--kv-cache-memory 12GiB --ctx 2048"
for r in a b; do
  prof c32_s2_$r X=1 -- $B --concurrency 32
  prof c32_s3_$r KVSPILL_ATTN_STAGES=3 -- $B --concurrency 32
  prof k8_auto_$r X=1 -- --kv-cache-memory 16GiB --ctx 8192
  prof k8_64_$r KVSPILL_ATTN_SPLITS=64 -- --kv-cache-memory 16GiB --ctx 8192
done
prof c16_s2 X=1 -- $B --concurrency 16
prof c16_s3 KVSPILL_ATTN_STAGES=3 -- $B --concurrency 16
prof c8_s2 X=1 -- $B --concurrency 8
prof c8_s3 KVSPILL_ATTN_STAGES=3 -- $B --concurrency 8
git checkout -q kvspill/kernels/decode_attention.py
LIMIT=$(( 560 - ($(date +%s) - T0) )) bash bench/results/2026-12-05-h200-q41-configs/scripts/call25.sh
(cd $OUT && tar czf all26.tgz *.txt && rm -f *.txt)
echo "call 26 done at $(( $(date +%s) - T0 )) s" | tee -a $L
