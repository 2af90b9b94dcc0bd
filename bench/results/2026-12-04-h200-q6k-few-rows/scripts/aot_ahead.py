import sys, inspect
sys.path.insert(0, ".devbench/s43")
import torch; torch.version.cuda = "12.8"
from aot import report
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import triton
from kvspill.kernels import gguf_gemv_int16x as g
def build(fn, const, warps, name):
    names = list(inspect.signature(fn.fn).parameters)
    ptrs = {"x_ptr": "*bf16", "w_ptr": "*u8", "bias_ptr": "*bf16", "out_ptr": "*bf16"}
    sig = {n: ("constexpr" if n in const else ptrs.get(n, "i32")) for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n.endswith("_ptr") or n == "stride_w"}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs), target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=1))
    report(k, name)
for lines in (0, 256):
    build(g.q4k_int16x_kernel, dict(HAS_LINEAR_BIAS=False, SB=16, BLOCK_N=8, USE_ASM=True, AHEAD_LINES=lines, PDL=True), 2, f"q4k 4096/8/2 ahead {lines}")
    build(g.q6k_int16x_kernel, dict(NSUB=1, BLOCK_N=2, HAS_LINEAR_BIAS=False, USE_ASM=True, AHEAD_LINES=lines // 4, PDL=True), 1, f"q6k 512/2/1 ahead {lines//4}")
