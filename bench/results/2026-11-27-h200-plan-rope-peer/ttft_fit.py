"""The plan's time to the first token against nine measured ones (H200, 2026-11-27/28), with the
committed `PREFILL_ATTENTION_SHARE`: each row's own placement (the engine's hot/cold tokens) and
chunk; a matmul rate of 760 TFLOP/s (the H200 calibrations: 736-800), H2D 55.1 GB/s, HBM 4.0 TB/s.
Run from the repository root: python bench/results/2026-11-27-h200-plan-rope-peer/ttft_fit.py"""

from kvspill.plan.bandwidths import Bandwidths
from kvspill.plan.costs import PREFILL_ATTENTION_SHARE, prefill_seconds
from kvspill.plan.spec import KNOWN_SHAPES

BW = Bandwidths(hbm_gbs=4000.0, h2d_gbs=55.1, d2h_gbs=55.0, gpu_tflops=760.0)
W3, W1 = KNOWN_SHAPES["llama-8b"], KNOWN_SHAPES["llama-1b"]
W3_WEIGHTS, W1_WEIGHTS = int(14.958 * 2**30), W1.weight_bytes(2)
ROWS = [  # (row, results folder, shape, weights, context, chunk, gpu tokens, cpu tokens, kv format, TTFT s)
    ("W3 128K split", "2026-11-27-h200-plan-rope-peer", W3, W3_WEIGHTS, 131072, 4096, 56032, 75040, "bf16", 17.77),
    ("W5 128K (exact prefill)", "2026-11-27-h200-plan-rope-peer C", W3, W3_WEIGHTS, 131072, 4096, 42720, 88352, "bf16", 17.94),
    ("W5 128K (exact prefill)", "2026-11-28-h200-w5-sparse-overlap", W3, W3_WEIGHTS, 131072, 4096, 42720, 88352, "bf16", 17.60),
    ("W3 512K sparse (exact prefill)", "2026-11-27-h200-w5-block-score", W3, W3_WEIGHTS, 524288, 8192, 13152, 511136, "bf16", 281.52),
    ("W1 1M sparse (exact prefill)", "2026-11-27-h200-w5-block-score", W1, W1_WEIGHTS, 1048576, 16384, 279584, 768992, "bf16", 267.63),
    ("W3 128K fp8 auto", "2026-11-27-h200-plan-rope-peer", W3, W3_WEIGHTS, 131072, 4096, 112064, 19008, "fp8", 23.42),
    ("W3 128K fp8 auto", "2026-11-27-h200-auto-crossover C", W3, W3_WEIGHTS, 131072, 4096, 112064, 19008, "fp8", 22.56),
    ("W3 256K fp8 auto", "2026-11-27-h200-plan-rope-peer C", W3, W3_WEIGHTS, 262144, 4096, 111040, 151104, "fp8", 81.24),
    ("W3 128K int8 split", "2026-11-27-h200-plan-rope-peer B", W3, W3_WEIGHTS, 131072, 4096, 107152, 23920, "int8", 67.44),
    ("W3 128K int8 auto", "2026-11-27-h200-plan-rope-peer C", W3, W3_WEIGHTS, 131072, 4096, 107152, 23920, "int8", 64.15),
]
for name, where, spec, weights, ctx, chunk, gpu, cpu, fmt, measured in ROWS:
    row_bytes = {"bf16": 2 * spec.head_dim, "fp8": spec.head_dim, "int8": spec.head_dim + 4}[fmt]
    kvpt = spec.num_layers * 2 * spec.num_kv_heads * row_bytes
    planned = prefill_seconds(spec, ctx, chunk, gpu, cpu, weights, kvpt, BW, PREFILL_ATTENTION_SHARE[fmt])
    print(f"{name:32s} {fmt:5s} measured {measured:7.2f} s  plan {planned:7.2f} s ({planned / measured:.2f})  {where}")
