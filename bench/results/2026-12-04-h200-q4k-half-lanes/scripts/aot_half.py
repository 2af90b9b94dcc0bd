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
    return report(k, name)
for sb, bn, w in [(16, 8, 2), (8, 8, 2), (32, 16, 4), (4, 16, 1)]:
    sass = build(g.q4k_int16x_kernel, dict(HAS_LINEAR_BIAS=False, SB=sb, BLOCK_N=bn, USE_ASM=True, PDL=True), w, f"half SB{sb} bn{bn} w{w}")
    import re
    print("   ", sorted(set(re.findall(r"LDG\.E[.A-Z0-9]*", sass))))
