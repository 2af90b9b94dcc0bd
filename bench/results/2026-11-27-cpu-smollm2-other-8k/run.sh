#!/usr/bin/env bash
cd /work/main; source .venv/bin/activate
T="--tasks variable_tracking --tasks common_words --lengths 8K --samples 10 --dtype float32 --hot-kv-tokens 256 --no-teacher-forced"
date -u; nice -n 5 kvspill eval $T --cold-attention sparse --sparse-budget-tokens 1024 --label "sparse 1/8" --out /tmp/ev/other-sparse8-8k > /tmp/ev/sparse8.log 2>&1; echo "sparse8 rc=$?"
date -u; nice -n 5 kvspill eval $T --label exact --out /tmp/ev/other-exact-8k > /tmp/ev/exact.log 2>&1; echo "exact rc=$?"
date -u; nice -n 5 kvspill eval $T --cold-attention sparse --sparse-budget-tokens 2048 --label "sparse 1/4" --out /tmp/ev/other-sparse4-8k > /tmp/ev/sparse4.log 2>&1; echo "sparse4 rc=$?"
date -u
