"""q41_int16x_kernel compiled for sm_90 on the CPU (Triton's own ptxas): registers, spills, SASS counts
beside Q4_K's q4k_int16x_kernel at the same (CHUNK, BLOCK_N, warps)."""
import sys

import torch

torch.version.cuda = "12.8"
sys.path.insert(0, "bench/results/2026-12-03-h200-mma-sync")
from aot import compile_kernel, report  # noqa: E402

from kvspill.kernels import gguf_gemv_int16x as g  # noqa: E402

sig = {"x_ptr": "*bf16", "w_ptr": "*u8", "bias_ptr": "*bf16", "out_ptr": "*bf16", "rows": "i32", "num_blocks": "i32", "stride_w": "i32"}
for spec in sys.argv[1:] or ["4096,8,4", "1024,8,1", "2048,8,2"]:
    chunk, bn, w = (int(v) for v in spec.split(","))
    c = dict(HAS_LINEAR_BIAS=False, KL=chunk // 32, BLOCK_N=bn, USE_ASM=True, PDL=True)
    report(compile_kernel(g.q41_int16x_kernel, dict(sig, **{k: "constexpr" for k in c}), c, num_warps=w), f"Q4_1 ({chunk}, {bn}, {w})")
    c = dict(HAS_LINEAR_BIAS=False, SB=chunk // 256, BLOCK_N=bn, USE_ASM=True, PDL=True, Q5=False)
    report(compile_kernel(g.q4k_int16x_kernel, dict(sig, **{k: "constexpr" for k in c}), c, num_warps=w), f"Q4_K ({chunk}, {bn}, {w})")
