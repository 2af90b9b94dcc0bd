#!/usr/bin/env bash
# The W3 / W5 rows on issue 54's code beside the code before it (dad9dea, 2026-12-02 13:03, the
# parent of its first kernel commit), alternated on one card: "no row of docs/performance.md gets
# slower" checked on whatever card comes. Carry .whl; the old tree is made from the copy's git
# (or carried as .devbench/old54, made the same way); about 550 s.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1
L=$OUT/rows_ab.log
{ date -u; git log --oneline | head -1; git status --short | grep -v "^??" | head -5; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
run() {  # timeout dir mode args...
  local left=$(( 575 - ($(date +%s) - T0) ))
  [ $left -lt $1 ] && { echo "skip $3 ($left s left)" | tee -a $L; return; }
  echo "== $2 $3 at $(( $(date +%s) - T0 )) s" | tee -a $L
  (cd $2 && PYTHONPATH=/tmp/site:$PWD timeout $1 python3 -m kvspill.bench "${@:4}" --mode $3 --out $OUT/rows.jsonl > $OUT/$3.log 2>&1)
  echo "rc $?: $(grep -v Warning $OUT/$3.log | tail -1 | cut -c1-200)" | tee -a $L
}
OLD=.devbench/old54
if [ ! -d $OLD/kvspill ]; then
  OLD=/tmp/old54; mkdir -p $OLD && git archive dad9dea kvspill pyproject.toml | tar -x -C $OLD || { echo "no old tree" | tee -a $L; exit 1; }
fi
A="--shape llama-8b --vram-budget 24GiB --cpu-kv-budget 40GiB --new-tokens 32"
W5="--shape llama-8b --vram-budget 24GiB --cpu-kv-budget 18GiB --ctx 131072 --new-tokens 32 --cold-attention sparse --sparse-budget-tokens 4096"
run 80 . new-w3-32k $A --ctx 32768
run 80 $OLD old-w3-32k $A --ctx 32768
run 110 $OLD old-w5-sparse $W5
run 110 . new-w5-sparse $W5
run 90 . new-w3-split $A --ctx 131072 --cold-attention split
run 90 $OLD old-w3-split $A --ctx 131072 --cold-attention split
python3 - <<'PY' | tee -a $L
import json, os
for l in open(os.environ["OUT"] + "/rows.jsonl"):
    d = json.loads(l)
    print(d["mode"], d["ctx"], d["decode_tok_s"], d.get("ttft_s"), d.get("plan_decode_tok_s"), d.get("floor_ratio"), d.get("gpu_kv_gib"), d.get("peak_gpu_reserved_gib"))
PY
(cd $OUT && tar czf logs.tgz *-*.log && rm -f old-*.log new-*.log)
echo "rows_ab done at $(( $(date +%s) - T0 )) s" | tee -a $L
