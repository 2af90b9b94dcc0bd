"""Re-plan decode for the all-GPU rows over quantized KV, and the cold rows around them, with the
committed constants: the gpu tier read at the stored bytes (before) and at bf16's bytes plus
int8's basis turns (`plan/costs.KV_DECODE_READS_AS_BF16`, `INT8_BASIS_TURN_PER_LAYER_S`, after).
Calibration of ../2026-11-27-h200-plan-rope-peer/ (call A), each row's own HBM copy rate and
placement. The two all-GPU rows are the ones the constants were fit to: in sample.
Run from the repository root: python bench/results/2026-11-28-h200-int8-planes/replan.py"""

from dataclasses import replace

from kvspill.plan.bandwidths import Bandwidths
from kvspill.plan.cold_rates import cpu_kv_rate
from kvspill.plan.costs import INT8_BASIS_TURN_PER_LAYER_S, decode_floor

CAL = Bandwidths(hbm_gbs=3917.7, h2d_gbs=55.1, stream_gbs=42.8, cpu_attn_gbs=65.5, cpu_attn_layer_s=0.62e-3)
WEIGHTS = int(14.958 * 2**30)  # W3's bf16 weights as the bench reports them
ROW = {"bf16": 256, "fp8": 128, "int8": 132}  # bytes of one K (or V) row of one kv head
ROWS = [  # name, format, cold path, gpu tokens, cold tokens, measured tok/s, HBM GB/s, folder
    ("fp8 all-GPU 128K", "fp8", "stream", 131072, 0, 100.25, 4130.2, "2026-11-27-h200-stream-graphs B"),
    ("int8 planes all-GPU 32K", "int8", "auto", 32768, 0, 141.74, 4168.6, "this folder"),
    ("int8 planes 128K", "int8", "auto", 108640, 22432, 31.28, 4168.6, "this folder"),
    ("int8 rows 128K auto", "int8", "auto", 107152, 23920, 29.06, 3917.7, "plan-rope-peer C"),
    ("int8 rows 128K split", "int8", "split", 107152, 23920, 8.15, 3917.7, "plan-rope-peer B"),
    ("fp8 128K auto", "fp8", "auto", 112064, 19008, 37.70, 3917.7, "plan-rope-peer A"),
    ("fp8 256K auto", "fp8", "auto", 111040, 151104, 4.46, 3917.7, "plan-rope-peer C"),
    ("bf16 128K stream", "bf16", "stream", 56032, 75040, 5.10, 3917.7, "plan-rope-peer A"),
]
for name, fmt, path, hot, cold, measured, hbm, where in ROWS:
    stored = 32 * 2 * 8 * ROW[fmt]
    as_bf16 = 32 * 2 * 8 * ROW["bf16"] if fmt in ("fp8", "int8") else stored
    bw = replace(CAL, hbm_gbs=hbm, cpu_attn_gbs=cpu_kv_rate(CAL.cpu_attn_gbs, fmt, 128))
    out = []
    for gpu_bytes, turns in (
        (hot * stored, 0.0),
        (hot * as_bf16, 32 * INT8_BASIS_TURN_PER_LAYER_S if fmt == "int8" else 0.0),
    ):
        floor = decode_floor(
            WEIGHTS, gpu_bytes, cold * stored, 0, bw, path, 32, cold_graphs=True, kv_format=fmt
        )
        out.append(1 / (floor.total_s + turns))
    print(
        f"{name:24s} measured {measured:7.2f}  before {out[0]:7.2f} ({out[0] / measured:.2f})"
        f"  after {out[1]:7.2f} ({out[1] / measured:.2f})  {where}"
    )
