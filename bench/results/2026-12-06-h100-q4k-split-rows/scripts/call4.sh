#!/usr/bin/env bash
# Call 4: Nsight Compute on the one-token int16-x GEMV (qkv, o, gate_up; weights from DRAM) in
# gguf's rows, split rows and split rows in groups of 8 (ncu_probe.py).
set -u
. bench/results/2026-12-04-h200-scale-pairs/scripts/prelude.sh call4
R=bench/results/2026-12-06-h100-q4k-split-rows/scripts
for G in 0 8; do mkdir -p /tmp/ps$G && cp -r kvspill /tmp/ps$G/ && python3 $R/q4k_split_patch.py /tmp/ps$G $G hdrptr | tee -a $L; done
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__inst_executed.sum,dram__sectors_read.sum,lts__t_sectors_srcunit_tex_aperture_device_op_read_lookup_miss.sum
for lay in gguf split split8; do
  P=/tmp/site:$PWD; [ $lay = split ] && P=/tmp/site:/tmp/ps0; [ $lay = split8 ] && P=/tmp/site:/tmp/ps8
  PYTHONPATH=$P timeout 150 /usr/local/cuda/bin/ncu --replay-mode application --kernel-name regex:int16x --launch-skip 0 --launch-count 6 \
    --cache-control none --clock-control none --metrics $M --csv --page raw python3 $R/ncu_probe.py $lay > $OUT/ncu_$lay.csv 2>$OUT/ncu_$lay.err
  echo "ncu $lay rc $? at $(( $(date +%s) - T0 )) s" | tee -a $L
done
