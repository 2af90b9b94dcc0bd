"""AOT sm_90 compile of the Q4_1 / Q8_0 one-token lanes (and, where the kernel takes TWO, the two-token
form): SASS summaries to OUT, instruction counts printed.   python aot_lanes.py OUT [two]"""
import inspect
import sys

sys.path.insert(0, "bench/results/2026-12-03-h200-mma-sync")
import torch

torch.version.cuda = "12.8"
import triton
from aot import report
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kvspill.kernels import gguf_gemv_int16x as g


def comp(fn, const, ptrs, div_extra, warps, stages, name):
    params = inspect.signature(fn.fn).parameters
    names = list(params)
    const = {**{n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}, **const}
    sig = {n: ("constexpr" if n in const else ptrs.get(n, "i32")) for n in names}
    div = [n for n in names if n.endswith("_ptr") or n in div_extra]
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n in div}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs), target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))
    return report(k, name)


lp = {"x_ptr": "*bf16", "w_ptr": "*u8", "bias_ptr": "*bf16", "out_ptr": "*bf16"}
forms = [False, True] if len(sys.argv) > 2 else [False]
out = []
for two in forms:
    extra = {"TWO": True} if two else {}
    for chunk, bn, w in [(1024, 8, 1), (2048, 16, 4)]:
        out.append(comp(g.q41_int16x_kernel, dict(HAS_LINEAR_BIAS=False, KL=chunk // 32, BLOCK_N=bn, USE_ASM=True, PDL=True, **extra), lp, ("rows", "stride_w", "stride_x", "stride_o"), w, 3, f"q41 lanes {(chunk, bn, w)} two={two}"))
    for chunk, bn, w in [(2048, 8, 4), (2048, 16, 4)]:
        out.append(comp(g.q80_int16x_kernel, dict(HAS_LINEAR_BIAS=False, KL=chunk // 64, BLOCK_N=bn, USE_ASM=True, PDL=True, **extra), lp, ("rows", "stride_w", "stride_x", "stride_o"), w, 3, f"q80 lanes {(chunk, bn, w)} two={two}"))
open(sys.argv[1], "w").write("\n=====\n".join(out))


if len(sys.argv) > 3:  # q4k_int16x_kernel: Q4_K's one-token configs, Q5_K's (and TWO where it takes it)
    out = []
    has_two = "TWO" in inspect.signature(g.q4k_int16x_kernel.fn).parameters
    for q5, configs in ((False, [(4096, 8, 4), (1024, 8, 1), (2048, 8, 2), (4096, 16, 4)]), (True, [(4096, 8, 4), (1024, 8, 1), (4096, 4, 2), (2048, 8, 2)])):
        for two in ([False, True] if has_two and q5 else [False]):
            extra = {"TWO": True} if two else {}
            for chunk, bn, w in configs:
                out.append(comp(g.q4k_int16x_kernel, dict(HAS_LINEAR_BIAS=False, SB=chunk // 256, BLOCK_N=bn, USE_ASM=True, PDL=True, Q5=q5, **extra), lp, ("rows", "stride_w", "stride_x", "stride_o"), w, 3, f"q4k int16x q5={q5} {(chunk, bn, w)} two={two}"))
    open(sys.argv[3], "w").write("\n=====\n".join(out))
