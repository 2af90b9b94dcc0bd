#!/usr/bin/env bash
# Call E: greedy tokens of the random 8B Q4_K_M shape: the unfused path twice (determinism), the
# unfused path with other attention split counts (PPS=8, 2: the control), the fused path.
set -u
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=bench/results/2026-12-04-h200-rope-in-decode/scripts; L=$OUT/callE.log
{ date -u; git log --oneline | head -1; git status --short | head -8; } | tee -a $L
for v in "0 0" "0 0b" "0 8" "0 2" "1 0"; do
  set -- $v; [ $(( $(date +%s) - T0 )) -lt 480 ] || break
  PPS=$([ "${2%b}" = 0 ] && echo "" || echo $2) KVSPILL_FUSED_ROPE_DECODE=$1 timeout 100 python3 $S/tokens.py random:llama-8b:q4_k_m > $OUT/tok_f$1_p$2.txt 2>&1
  echo "tok f$1 pps $2 rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L
done
python3 - <<PY | tee -a $L
import json
runs = {}
for name in ("f0_p0", "f0_p0b", "f0_p8", "f0_p2", "f1_p0"):
    try:
        runs[name] = json.loads(open("$OUT/tok_%s.txt" % name).read().strip().splitlines()[-1])
    except Exception as e:
        print(name, "failed", e)
base = runs.get("f0_p0")
for name, toks in runs.items():
    if base is None or name == "f0_p0":
        continue
    firsts = [next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), len(x)) for x, y in zip(base, toks)]
    print("f0_p0 vs", name, "first differing token of each request:", firsts)
PY
(cd $OUT && tar czf allE.tgz *.txt && rm -f *.txt)
echo "call E done at $(( $(date +%s) - T0 )) s" | tee -a $L
