set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
timeout 150 python3 .devbench/greedy.py ctl $OUT/greedy_ctl.json > $OUT/greedy_ctl.log 2>&1; echo rc $?
cp .devbench/greedy_off.json $OUT/ 2>/dev/null
python3 -c "
import json; a=json.load(open('.devbench/greedy_off.json')); b=json.load(open('$OUT/greedy_ctl.json'))
for k in a:
    n=next((i for i,(x,y) in enumerate(zip(a[k],b[k])) if x!=y), None); print('off vs ctl: seq', k, len(a[k]), len(b[k]), 'first difference at', n)"
