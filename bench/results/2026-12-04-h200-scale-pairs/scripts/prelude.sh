# Sourced by calls B-E of this folder (`. bench/.../scripts/prelude.sh NAME`): the wheels on the
# path (installed once a machine), T0, S (this folder), L ($OUT/NAME.log) and the log's header.
T0=$(date +%s)
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=bench/results/2026-12-04-h200-scale-pairs/scripts
L=$OUT/$1.log
{ date -u; git log --oneline | head -1; git status --short | head -20; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
