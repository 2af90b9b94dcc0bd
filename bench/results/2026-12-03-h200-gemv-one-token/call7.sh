set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
date -u
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gguf_mma.py -k tuned tests/runner/test_profile_forward.py 2>&1 | tail -1
timeout 150 python3 .devbench/greedy.py off $OUT/greedy_off.json > $OUT/greedy_off.log 2>&1; echo rc $?; grep -v -i warn $OUT/greedy_off.log | tail -2 | cut -c1-300
timeout 150 python3 .devbench/greedy.py on $OUT/greedy_on.json > $OUT/greedy_on.log 2>&1; echo rc $?; grep -v -i warn $OUT/greedy_on.log | tail -2 | cut -c1-300
python3 -c "
import json; a=json.load(open('$OUT/greedy_off.json')); b=json.load(open('$OUT/greedy_on.json'))
for k in a:
    n=next((i for i,(x,y) in enumerate(zip(a[k],b[k])) if x!=y), None); print('seq', k, len(a[k]), len(b[k]), 'tokens, first difference at', n, 'distinct tokens', len(set(a[k])))"
date -u
