"""sm_90 compile of the side-by-side Q6_K kernel for the table's configs: registers, spills, SASS counts."""
import sys, inspect
sys.path.insert(0, "bench/results/2026-12-03-h200-mma-sync")  # its aot.py
import torch; torch.version.cuda = "12.8"
from aot import report
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import triton
from kvspill.kernels import gguf_gemv_int16x as g
from kvspill.kernels.gguf_gemv import Q6K_INT16X_CONFIGS, Q4K_INT16X_CONFIGS
fn = g.q6k_int16x_kernel
names = list(inspect.signature(fn.fn).parameters)
ptrs = {"x_ptr": "*bf16", "w_ptr": "*u8", "bias_ptr": "*bf16", "out_ptr": "*bf16"}
for _, _, (chunk, bn, warps) in Q6K_INT16X_CONFIGS:
    const = dict(NB=chunk // 256, BLOCK_N=bn, HAS_LINEAR_BIAS=False, USE_ASM=True, PDL=True)
    sig = {n: ("constexpr" if n in const else ptrs.get(n, "i32")) for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n.endswith("_ptr") or n == "stride_w"}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs), target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=1))
    report(k, f"q6k {chunk}/{bn}/{warps}")
fn = g.q4k_int16x_kernel
names = list(inspect.signature(fn.fn).parameters)
for _, _, (chunk, bn, warps) in Q4K_INT16X_CONFIGS:
    const = dict(SB=chunk // 256, BLOCK_N=bn, HAS_LINEAR_BIAS=False, USE_ASM=True, PDL=True)
    sig = {n: ("constexpr" if n in const else ptrs.get(n, "i32")) for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n.endswith("_ptr") or n == "stride_w"}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs), target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=1))
    report(k, f"q4k {chunk}/{bn}/{warps}")
