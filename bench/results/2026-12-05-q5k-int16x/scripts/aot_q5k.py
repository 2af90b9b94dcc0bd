import sys
import torch; torch.version.cuda = "12.8"
sys.path.insert(0, "bench/results/2026-12-03-h200-mma-sync")
from aot import compile_kernel, report
from kvspill.kernels import gguf_gemv_int16x as g
sig = {"x_ptr":"*bf16","w_ptr":"*u8","bias_ptr":"*bf16","out_ptr":"*bf16","rows":"i32","num_blocks":"i32","stride_w":"i32"}
for spec in sys.argv[1:]:
    q5, chunk, bn, w = spec.split(",")
    c = dict(HAS_LINEAR_BIAS=False, SB=int(chunk)//256, BLOCK_N=int(bn), USE_ASM=True, PDL=True, Q5=q5 == "1")
    s = dict(sig, **{k: "constexpr" for k in c})
    report(compile_kernel(g.q4k_int16x_kernel, s, c, num_warps=int(w)), f"Q5={q5} ({chunk}, {bn}, {w})")
