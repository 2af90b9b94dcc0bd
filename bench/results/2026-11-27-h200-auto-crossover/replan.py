"""Re-plan every row of these calls with the committed constants, from each call's calibration:
at the plan's own placement (what the bench prints) and at the engine's (its measured hot/cold
tokens). Run from the repository root: python bench/results/2026-11-27-h200-auto-crossover/replan.py"""

import json
from dataclasses import replace
from pathlib import Path

from kvspill.plan.bandwidths import Bandwidths
from kvspill.plan.cold_rates import cpu_kv_rate
from kvspill.plan.costs import decode_floor

HERE = Path(__file__).parent
CAL = {  # doctor --calibrate of each machine (call B ran on call A's machine)
    "A": Bandwidths(hbm_gbs=4084.6, h2d_gbs=54.9, stream_gbs=41.8, cpu_attn_gbs=71.4, cpu_attn_layer_s=0.54e-3, measured_at="A"),
    "C": Bandwidths(hbm_gbs=4026.9, h2d_gbs=42.5, stream_gbs=42.5, cpu_attn_gbs=54.0, cpu_attn_layer_s=0.55e-3, measured_at="C"),
    "D": Bandwidths(hbm_gbs=4173.5, h2d_gbs=55.3, stream_gbs=43.8, cpu_attn_gbs=66.0, cpu_attn_layer_s=0.53e-3, measured_at="D"),
}
WEIGHTS = int(14.958 * 2**30)  # W3's bf16 weights as the bench reports them (weight_gib)

for call, machine in (("a", "A"), ("b", "A"), ("c", "C"), ("d", "D")):
    for line in open(HERE / f"call_{call}_bench.jsonl"):
        row = json.loads(line)
        fmt = "fp8" if "fp8" in row["mode"] else "bf16"
        kvpt = 32 * 8 * 128 * 2 * (1 if fmt == "fp8" else 2)
        bw = replace(CAL[machine], cpu_attn_gbs=cpu_kv_rate(CAL[machine].cpu_attn_gbs, fmt, 128))
        mode = row["mode"]
        path = "auto" if mode.startswith("auto") else "split" if "split" in mode else "stream"
        graphs = not mode.startswith("eager")
        measured = row["decode_tok_s"]
        out = []
        for hot, cold in (row["plan_placement"], (row["hot_tokens"], row["cold_tokens"])):
            floor = decode_floor(WEIGHTS, hot * kvpt, cold * kvpt, 0, bw, path, 32, cold_graphs=graphs, kv_format=fmt)
            out.append(f"{1 / floor.total_s:6.2f} ({1 / floor.total_s / measured:.2f})")
        print(f"{call.upper()} {mode:30s} measured {measured:6.2f}  plan {out[0]}  at the engine's placement {out[1]}")
