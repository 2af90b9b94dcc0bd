import sys, inspect
sys.path.insert(0, ".devbench/s43")
import torch; torch.version.cuda = "12.8"
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from aot import report
from kvspill.kernels import gguf_mma as g
import triton.language as tl

def build(fn, const, warps, stages, name, ptrs):
    names = list(inspect.signature(fn.fn).parameters)
    sig = {n: ("constexpr" if n in const else ptrs.get(n, "i32")) for n in names}
    div = [n for n in names if n.endswith("_ptr") or n in ("stride_w",)]
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n in div}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs), target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))
    return report(k, name)

ptrs = {"x_ptr": "*bf16", "xs_ptr": "*bf16", "w_ptr": "*u8", "bias_ptr": "*bf16", "out_ptr": "*bf16", "part_ptr": "*fp32", "counter_ptr": "*i32"}
for kern, name, bn, warps, stages, two in ((g._q4k_mma_kernel, "q4k", 32, 2, 3, True), (g._q6k_mma_kernel, "q6k", 32, 2, 2, False)):
    for tp in (8, 32):
        for inplace in (False, True):
            c = dict(T_PAD=tp, BLOCK_N=bn, SPLIT_K=8, MAGIC=False, HAS_BIAS=False, DOT_DTYPE=tl.bfloat16, WHOLE=False, WORDS=True, TWO_ACC=two, X_IN_PLACE=inplace, PDL=True)
            build(kern, c, warps, stages, f"{name} t{tp} inplace={inplace}", ptrs)
