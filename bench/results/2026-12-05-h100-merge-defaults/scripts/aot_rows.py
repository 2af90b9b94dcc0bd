"""sm_90 compiles on a CPU machine (Triton of this checkout's venv): q4k_int16x_kernel against the
persistent q4k_int16x_rows_kernel, per (CHUNK, BLOCK_N, warps, stages): registers, shared memory,
SASS counts, cp.async (LDGSTS) of the weight loads.   python3 aot_rows.py 4096,8,4,3 ..."""

import sys

import torch

torch.version.cuda = "12.8"
sys.path.insert(0, "bench/results/2026-12-03-h200-mma-sync")
from aot import compile_kernel, report  # noqa: E402

from kvspill.kernels import gguf_gemv_int16x as g  # noqa: E402

SIG = {
    "x_ptr": "*bf16",
    "w_ptr": "*u8",
    "bias_ptr": "*bf16",
    "out_ptr": "*bf16",
    "rows": "i32",
    "num_blocks": "i32",
    "stride_w": "i32",
}
for spec in sys.argv[1:]:
    chunk, bn, w, stages = (int(v) for v in spec.split(","))
    c = dict(HAS_LINEAR_BIAS=False, SB=chunk // 256, BLOCK_N=bn, USE_ASM=True, PDL=True, Q5=False)
    sass = report(
        compile_kernel(g.q4k_int16x_kernel, dict(SIG, **{k: "constexpr" for k in c}), c, num_warps=w),
        f"one tile ({chunk}, {bn}, {w})",
    )
    c["STAGES"] = stages
    k = compile_kernel(g.q4k_int16x_rows_kernel, dict(SIG, **{k: "constexpr" for k in c}), c, num_warps=w)
    sass = report(k, f"rows loop ({chunk}, {bn}, {w}) stages {stages}")
    print("   LDGSTS", sass.count("LDGSTS"), "LDG.", sass.count("LDG."), "shared", k.metadata.shared)
