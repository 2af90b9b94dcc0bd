"""Re-plan the exact rows of these calls with the committed constants, from call A's calibration
(calls B and C ran on the same machine), at the engine's placement (the row's hot/cold tokens), graphs on as in the engine.
Run from the repository root: python bench/results/2026-11-27-h200-plan-rope-peer/replan.py"""

import json
from dataclasses import replace
from pathlib import Path

from kvspill.plan.bandwidths import Bandwidths
from kvspill.plan.cold_rates import cpu_kv_rate
from kvspill.plan.costs import decode_floor

HERE = Path(__file__).parent
CAL = Bandwidths(hbm_gbs=3917.7, h2d_gbs=55.1, stream_gbs=42.8, cpu_attn_gbs=65.5, cpu_attn_layer_s=0.62e-3)
WEIGHTS = int(14.958 * 2**30)  # W3's bf16 weights as the bench reports them (weight_gib)
ROW = {"bf16": 2 * 128, "fp8": 128, "int8": 128 + 4}  # bytes of one K (or V) row of one kv head

for name in ("call_a_w3.jsonl", "call_b_w3_int8.jsonl", "call_c_w3.jsonl"):
    for line in open(HERE / name):
        row = json.loads(line)
        mode = row["mode"]
        fmt = next((f for f in ("fp8", "int8") if f"kv-{f}" in mode), "bf16")
        kvpt = 32 * 2 * 8 * ROW[fmt]
        bw = replace(CAL, cpu_attn_gbs=cpu_kv_rate(CAL.cpu_attn_gbs, fmt, 128))
        path = "auto" if mode.startswith("auto") else "split" if "split" in mode else "stream"
        floor = decode_floor(
            WEIGHTS, row["hot_tokens"] * kvpt, row["cold_tokens"] * kvpt, 0, bw, path, 32, cold_graphs=True, kv_format=fmt
        )
        measured = row["decode_tok_s"]
        print(
            f"{mode:28s} measured {measured:6.2f}  plan {1 / floor.total_s:6.2f} ({1 / floor.total_s / measured:.2f})"
            f"  bench's sized plan {row['sized_plan_decode_tok_s']} ({row['sized_plan_vs_measured']})"
        )
