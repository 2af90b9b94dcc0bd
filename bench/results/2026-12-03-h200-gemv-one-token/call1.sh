set -u
export PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
date -u; git log -1 --format=%h
mkdir -p $OUT/g1 $OUT/sweep
timeout 60 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis -k regex:q4k_gemv --launch-skip 2 -c 4 python3 .devbench/ncu_one.py > $OUT/ncu.txt 2>&1; echo ncu rc=$?; tail -5 $OUT/ncu.txt
timeout 200 python3 .devbench/gemv1_sweep.py $OUT/g1 150 2>&1 | tee $OUT/g1/log.txt | grep -v Warning
timeout 280 python3 -m kvspill.bench.mma_sweep --budget-s 260 --out $OUT/sweep 2>&1 | tee $OUT/sweep/log.txt | tail -15
date -u
