set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
mkdir -p $OUT/s16
timeout 150 python3 .devbench/sweep16.py $OUT/s16 2>&1 | grep -v Warn | tee $OUT/s16/log.txt
