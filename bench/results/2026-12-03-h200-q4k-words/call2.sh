#!/bin/bash
# Session 35 call 2 (08:24 UTC): GPU tests of the words forms and the fused attention merge; the
# Q6_K words sweep; the attention kernel timing (fused merge against the merge kernel); engine rows.
# (Rebuilt from the session log: the working copy of this script was overwritten after the call.
# HEADFILES/head/: the GEMV-prologue files as at HEAD, so that those uncommitted edits did not run.)
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
[ -f .devbench/s35/HEADFILES ] && for f in $(cat .devbench/s35/HEADFILES); do cp .devbench/s35/head/$f $f; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; git log --oneline | head -1
timeout 100 python3 -m pytest -q -x tests/kernels/test_gguf_mma.py -k "words or half" tests/kernels/test_decode_attention.py -p no:cacheprovider 2>&1 | tail -3
echo "tests done at $(( $(date +%s) - T0 )) s"
timeout 115 python3 -m kvspill.bench.mma_sweep --types Q6_K --forms words --tokens 4 8 16 --budget-s 100 --out $OUT/sweep6 2>&1 | grep -E "top|tokens|picks|Error"
echo "q6 sweep done at $(( $(date +%s) - T0 )) s"
timeout 40 python3 .devbench/s35/attn_fused.py --contexts 8192 32768 --batches 1 8 --forms fused separate > $OUT/attn.jsonl 2>&1; echo "attn rc $?"; cut -c1-260 $OUT/attn.jsonl | head -20
echo "kernels done at $(( $(date +%s) - T0 )) s"
P="python3 -m kvspill.bench.profile_decode --steps 100"
N=0
run() { N=$((N+1)); echo "== $N $*"; timeout 60 env "$@" > $OUT/run$N.txt 2>&1; grep -E "engine.step|Error|error" $OUT/run$N.txt | head -2; }
PICK6=$OUT/sweep6/mma_configs.json
run KVSPILL_FUSED_DECODE_MERGE=0 $P --shape llama-1b --ctx 8192
run KVSPILL_FUSED_DECODE_MERGE=1 $P --shape llama-1b --ctx 8192
run KVSPILL_FUSED_DECODE_MERGE=0 $P --shape llama-8b:fp8 --ctx 8192
run KVSPILL_FUSED_DECODE_MERGE=1 $P --shape llama-8b:fp8 --ctx 8192
run KVSPILL_FUSED_DECODE_MERGE=1 $P --shape llama-8b:q4_k_m --ctx 8192
run KVSPILL_FUSED_DECODE_MERGE=1 $P --shape llama-8b:q4_k_m --ctx 2048
run KVSPILL_FUSED_DECODE_MERGE=1 $P --shape llama-8b:q4_k_m --ctx 2048 --concurrency 8 --kernels 5
run KVSPILL_FUSED_DECODE_MERGE=1 KVSPILL_MMA_CONFIGS=$PICK6 $P --shape llama-8b:q4_k_m --ctx 2048 --concurrency 8 --kernels 5
echo "call done at $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf runs.tgz run*.txt && rm run*.txt
# Call 2b (warm machine, right after): words configs at the counts the sweeps left out
#   timeout 70 python3 .devbench/s35/mma_more.py Q4_K 2,32; timeout 60 python3 .devbench/s35/mma_more.py Q6_K 32
