#!/usr/bin/env bash
# Every 20 s: the GPU's used memory and utilization (nvidia-smi, all processes, CUDA context
# included) and the bench process's host RSS, until the job is done.
while [ ! -f /tmp/m1/done ]; do
  g=$(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader,nounits | head -1)
  r=$(ps -C python3 -o rss= | sort -n | tail -1)
  echo "$(date -u +%H:%M:%S) gpu_used_mib,util=$g host_rss_kib=$r" >> /tmp/m1/samples.txt
  sleep 20
done
