#!/usr/bin/env bash
# Call A+E (carry [".whl", ".devbench", ".peer"]): call E's GPU work while llama.cpp builds (-j12), then the
# random-weight Llama-3.1-8B f16 GGUF and its Q4_K_M by llama-quantize. Leaves the machine warm for callB.sh.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
S=.devbench/s38; L=$OUT/callA.log
{ date -u; git log --oneline | head -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a $L
(timeout 560 bash $S/callE.sh > $OUT/callE.out 2>&1) &
sed -i 's/-j16 --target/-j12 --target/' $S/llamacpp_peer.sh
PEER=.peer bash $S/llamacpp_peer.sh build 2>&1 | tail -2 | tee -a $L
echo "build done at $(( $(date +%s) - T0 )) s" | tee -a $L
SHAPE=8b PEER=.peer bash $S/llamacpp_peer.sh model 2>&1 | tail -2 | tee -a $L
if [ ! -f /tmp/l8b-Q4_K_M.gguf ]; then
  timeout $(( 585 - ($(date +%s) - T0) )) /tmp/lcpp-build/bin/llama-quantize /tmp/l8b.gguf /tmp/l8b-Q4_K_M.part Q4_K_M 16 > /tmp/quant.log 2>&1 \
    && mv /tmp/l8b-Q4_K_M.part /tmp/l8b-Q4_K_M.gguf
  tail -1 /tmp/quant.log | tee -a $L
fi
ls -la /tmp/l8b* | tee -a $L; wait
(cd $OUT && tar czf profE.tgz prof*.txt tests.log && rm -f prof*.txt tests.log)
echo "call A done at $(( $(date +%s) - T0 )) s" | tee -a $L
