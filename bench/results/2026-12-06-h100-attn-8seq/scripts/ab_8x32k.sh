# Sourced by call4.sh and call4_h200.sh after prof_tree.sh: `ab_8x32k LIMIT` runs 8 x 32K with the
# 32-key tiles (the checkout's default) against the old (64, 4, 2) on a patched copy, alternated
# twice, each run skipped past LIMIT seconds.
ab_8x32k() {
  mkdir -p /tmp/ae && cp -r kvspill /tmp/ae/ && python3 bench/results/2026-12-06-h100-attn-8seq/scripts/attn_env_patch.py /tmp/ae | tee -a $L
  which_tree ae PYTHONPATH=/tmp/site:/tmp/ae
  local args="--shape llama-8b:q4_k_m --steps 50 --kv-cache-memory 40GiB --ctx 32768 --concurrency 8" run
  for run in 1 2; do
    prof c8x32k_new_$run $1 PYTHONPATH=/tmp/site:$PWD -- $args
    prof c8x32k_old_$run $1 PYTHONPATH=/tmp/site:/tmp/ae XLAUNCH=64,4,2 -- $args
  done
}
