#!/usr/bin/env bash
# Every 2 s until the job is done: the whole card's used MiB and utilization (nvidia-smi, CUDA
# context included), each compute process's MiB, and the largest python3 RSS.
while [ ! -f /tmp/m1/done ]; do
  g=$(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader,nounits | head -1)
  p=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | tr '\n' ';')
  r=$(ps -C python3 -o rss= | sort -n | tail -1)
  echo "$(date -u +%H:%M:%S) gpu_used_mib,util=$g procs=$p host_rss_kib=$r" >> /tmp/m1/samples.txt
  sleep 2
done
