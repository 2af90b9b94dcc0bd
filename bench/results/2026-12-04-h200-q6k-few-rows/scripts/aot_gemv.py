"""sm_90 compile of the int16-x one-token kernels: registers, SASS counts, with and without PREFETCH."""
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

for chunk, bn, warps, pf in [(4096, 8, 2, False), (1024, 8, 2, False), (1024, 8, 2, True), (1024, 16, 2, True), (2048, 8, 2, True), (512, 8, 1, True)]:
    build(g.q4k_int16x_kernel, dict(HAS_LINEAR_BIAS=False, SB=chunk // 256, BLOCK_N=bn, USE_ASM=True, PREFETCH=pf, PDL=True), warps, f"q4k {chunk}/{bn}/{warps} pf={pf}")
for bn, warps, pf in [(2, 1, False), (2, 1, True), (4, 1, True), (8, 2, True)]:
    build(g.q6k_int16x_kernel, dict(NSUB=1, BLOCK_N=bn, HAS_LINEAR_BIAS=False, USE_ASM=True, PREFETCH=pf, PDL=True), warps, f"q6k 512/{bn}/{warps} pf={pf}")
