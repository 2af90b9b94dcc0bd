set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
date -u
timeout 400 python3 .devbench/attn_sweep.py $OUT/attn.json 2>&1 | grep -v Warn
date -u
