# Sourced by rows_ab.sh and serve_fp8stream.sh (`. .../ab.sh NAME`): the wheels on the path, T0, L
# ($OUT/NAME.log) and its header; OLD, the tree before issue 54 (dad9dea: carried as
# .devbench/old54, else `git archive` from the device copy's git); `run TIMEOUT DIR MODE ARGS...`
# (one `python -m kvspill.bench` row of the tree in DIR, skipped when it would pass 575 s);
# `rows_done` (the rows' figures to the log, their logs packed).
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1
L=$OUT/$1.log
{ date -u; git log --oneline | head -1; git status --short | grep -v "^??" | head -5; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
OLD=.devbench/old54
if [ ! -d $OLD/kvspill ]; then
  OLD=/tmp/old54; mkdir -p $OLD && git archive dad9dea kvspill pyproject.toml | tar -x -C $OLD || { echo "no old tree" | tee -a $L; exit 1; }
fi
run() {
  local left=$(( 575 - ($(date +%s) - T0) ))
  [ $left -lt $1 ] && { echo "skip $3 ($left s left)" | tee -a $L; return; }
  echo "== $2 $3 at $(( $(date +%s) - T0 )) s" | tee -a $L
  (cd $2 && PYTHONPATH=/tmp/site:$PWD timeout $1 python3 -m kvspill.bench "${@:4}" --mode $3 --out $OUT/rows.jsonl > $OUT/$3.log 2>&1)
  echo "rc $?: $(grep -v Warning $OUT/$3.log | tail -1 | cut -c1-200)" | tee -a $L
}
rows_done() {
  python3 - <<'PY' | tee -a $L
import json, os
for l in open(os.environ["OUT"] + "/rows.jsonl"):
    d = json.loads(l)
    print(d["mode"], d["ctx"], d["decode_tok_s"], d.get("ttft_s"), d.get("plan_decode_tok_s"), d.get("floor_ratio"),
          d.get("gpu_kv_gib"), d.get("cold_tokens"), d.get("peak_gpu_reserved_gib"))
PY
  (cd $OUT && tar czf logs.tgz old-*.log new-*.log 2>/dev/null; rm -f old-*.log new-*.log)
}
