set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
date -u; git log -1 --format=%h
mkdir -p $OUT/s16
timeout 150 python3 .devbench/sweep16.py $OUT/s16 2>&1 | grep -v Warn | tee $OUT/s16/log.txt
timeout 60 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis -k regex:q4k_gemv16 --launch-skip 2 -c 2 python3 .devbench/ncu16.py $OUT/s16/best.json > $OUT/ncu16.txt 2>&1; echo ncu rc=$?
grep -E "Duration|Registers Per|Achieved Occ|DRAM Through|L1/TEX Cache|Compute \(SM\)|Warp Cycles Per Issued" $OUT/ncu16.txt
P="--shape llama-8b:q4_k --vram-budget 16GiB --ctx 8192 --steps 100 --kernels 10"
timeout 150 python3 .devbench/prof_with.py old $P > $OUT/prof_old.txt 2>&1; echo rc $?
timeout 150 python3 .devbench/prof_with.py $OUT/s16/best.json $P > $OUT/prof_new.txt 2>&1; echo rc $?
for f in prof_old prof_new; do echo == $f; grep -v Warn $OUT/$f.txt | head -30 | cut -c1-160; done
date -u
