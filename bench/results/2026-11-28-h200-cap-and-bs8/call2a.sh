#!/usr/bin/env bash
# Session 18, call 2a: the allocator cap's fix on a GPU. NVML names this process; three W1 engines
# (8 GiB budget each) at once on one card (the first cap gave each 0 bytes beside the others);
# the engine's GPU tests. Leaves half of the SmolLM2 GGUF in /tmp for call 2b.
set -u
for w in .whl/*.whl; do python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" >/dev/null 2>&1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
cp .smolA/smolpart_aa /tmp/smolpart_aa &
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 - <<'PY'
import torch
from kvspill.engine_checks import _nvml_process_memory, own_memory_outside_allocator
x = torch.empty(2**30, dtype=torch.uint8, device="cuda")
free, total = torch.cuda.mem_get_info(0); res = torch.cuda.memory_reserved(0)
used, n = _nvml_process_memory(0)
print("nvml: this process", used, "processes", n, "| reserved", res, "| card outside allocator", total - free - res,
      "| own outside", own_memory_outside_allocator(0, res, total - free - res))
PY
for i in 1 2 3; do
  ( timeout 150 python3 -m kvspill.bench --shape llama-1b --cap-gib 8 --cpu-kv-gib 2 --ctx 32768 --new-tokens 16 --mode conc-$i --out $OUT/conc.jsonl > /tmp/conc$i.log 2>&1; echo "conc $i rc=$?" ) &
  sleep 2
done
wait
grep -ih "error" /tmp/conc*.log | grep -v -i warn | head -5
python3 .devbench/s18/show.py $OUT/conc.jsonl
date -u
timeout 330 python3 -m pytest -q -x tests/engine/test_gpu.py tests/engine/test_startup.py -p no:cacheprovider 2>&1 | tail -4
date -u; ls -la /tmp/smolpart_aa
