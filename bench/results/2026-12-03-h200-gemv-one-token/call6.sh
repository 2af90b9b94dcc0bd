set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
CUDA_LAUNCH_BLOCKING=1 timeout 150 python3 .devbench/greedy.py off $OUT/greedy_off.json > $OUT/greedy_off.log 2>&1; echo rc $?
grep -v Warn $OUT/greedy_off.log | grep -v "^ *warn" | tail -45 | cut -c1-220
