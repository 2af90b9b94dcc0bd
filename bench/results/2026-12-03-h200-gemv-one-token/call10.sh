set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
date -u
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_attention.py 2>&1 | tail -1
P="--shape llama-8b:q4_k --ctx 8192 --steps 100"
timeout 100 python3 .devbench/prof_before2.py $P > $OUT/prof2_before_8k.txt 2>&1; echo rc $?
timeout 100 python3 -m kvspill.bench.profile_decode $P --kernels 10 > $OUT/prof2_after_8k.txt 2>&1; echo rc $?
for f in prof2_before_8k prof2_after_8k; do echo == $f; grep -A1 "pure decode steps" $OUT/$f.txt; done
grep -E "_kernel " $OUT/prof2_after_8k.txt | cut -c1-70,150-200 | head -8
date -u
