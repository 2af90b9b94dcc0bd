import sys, inspect
sys.path.insert(0, ".devbench/s43")
import torch; torch.version.cuda = "12.8"
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from aot import report
from kvspill.kernels import gguf_gemv_int16x as g
from kvspill.kernels import fp8_gemv as f

def build(fn, const, warps, name, ptrs):
    names = list(inspect.signature(fn.fn).parameters)
    sig = {n: ("constexpr" if n in const else ptrs.get(n, "i32")) for n in names}
    div = [n for n in names if n.endswith("_ptr") or n in ("stride_w", "K", "N")]
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n in div}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs), target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps))
    report(k, name)

ptrs = {"x_ptr": "*bf16", "w_ptr": "*u8", "bias_ptr": "*bf16", "out_ptr": "*bf16"}
for gated in (False, True):
    build(g.q4k_int16x_kernel, dict(HAS_LINEAR_BIAS=False, SB=16, BLOCK_N=8, USE_ASM=True, GATED=gated, PDL=True), 2, f"q4k_4096_8_2 gated={gated}", ptrs)
for wdt, bn, bk, nw in (("bf16", 8, 512, 4), ("fp8e4nv", 16, 256, 4)):
    p = {"x_ptr": "*bf16", "w_ptr": f"*{wdt}", "scale_ptr": "*fp32", "bias_ptr": "*bf16", "out_ptr": "*bf16"}
    for gated in (False, True):
        c = dict(HAS_BIAS=False, USE_DOT=False, EVEN_K=True, BLOCK_N=bn, BLOCK_K=bk, NUM_STAGES=3, INTERPRETER=False, HAS_SCALE=wdt != "bf16", GATED=gated, PDL=True)
        build(f._fp8_gemv_kernel, c, nw, f"fp8gemv {wdt} gated={gated}", p)
