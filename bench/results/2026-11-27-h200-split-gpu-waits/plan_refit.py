"""Each row's plan with the CPU path's fixed time per layer (plan/costs.py CPU_ATTN_OVERHEAD_PER_LAYER_S),
recomputed from the plan the run printed: rows whose cold KV the CPU attends (cpu, split: the
CPU's share is the longer one at the engine's fraction) gain num_layers x 0.45 ms per token."""

import json
from pathlib import Path

LAYERS = {"llama-8b": 32, "llama-1b": 16}
here = Path(__file__).parent
for name in ("call_c_bench.jsonl", "call_d_bench.jsonl"):
    for line in open(here / name):
        d = json.loads(line)
        if not d.get("cold_cpu_share"):
            continue
        plan = 1 / (1 / d["plan_decode_tok_s"] + LAYERS[d["shape"]] * 0.45e-3)
        print(f"{name[:6]} {d['mode']:32} {d['ctx']:>7} measured {d['decode_tok_s']:6.2f} "
              f"plan before {d['plan_decode_tok_s']:6.2f} ({d['plan_decode_tok_s'] / d['decode_tok_s']:.2f}) "
              f"now {plan:6.2f} ({plan / d['decode_tok_s']:.2f})")
