"""Q8_0's int16-x lanes compiled for sm_90 on the dev host (Triton 3.9), beside Q4_1's at its table's
configs: registers, spills, SASS instructions.
    python3 bench/results/2026-12-05-h200-q41-configs/scripts/aot_q80.py"""

import sys, inspect

sys.path.insert(0, "bench/results/2026-12-03-h200-mma-sync")
import torch

torch.version.cuda = "12.8"
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from aot import report
from kvspill.kernels import gguf_gemv_int16x as g


def build(fn, kl, block_n, warps, name):
    names = list(inspect.signature(fn.fn).parameters)
    const = dict(HAS_LINEAR_BIAS=False, KL=kl, BLOCK_N=block_n, USE_ASM=True, PDL=True)
    ptrs = {"x_ptr": "*bf16", "w_ptr": "*u8", "bias_ptr": "*bf16", "out_ptr": "*bf16"}
    sig = {n: ("constexpr" if n in const else ptrs.get(n, "i32")) for n in names}
    div = [n for n in names if n.endswith("_ptr") or n in ("rows", "stride_w")]
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n in div}
    k = triton.compile(
        ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs),
        target=GPUTarget("cuda", 90, 32),
        options=dict(num_warps=warps),
    )
    report(k, name)


for chunk, bn, w in [(2048, 8, 4), (1024, 8, 2), (2048, 16, 4), (1024, 4, 1)]:
    build(
        g.q80_int16x_kernel,
        chunk // 64,
        bn,
        w,
        f"q80 {(chunk, bn, w)} (weights a thread {bn * chunk // (32 * w)})",
    )
for chunk, bn, w in [(1024, 8, 1), (2048, 16, 4)]:
    build(
        g.q41_int16x_kernel,
        chunk // 32,
        bn,
        w,
        f"q41 {(chunk, bn, w)} (weights a thread {bn * chunk // (32 * w)})",
    )

from kvspill.kernels import gguf_gemv as gg
from kvspill.kernels.gguf_dequant import kernel_meta


def build_generic(chunk, bn, warps):
    fn = gg._gemv_fma_kernel
    names = list(inspect.signature(fn.fn).parameters)
    const = dict(**kernel_meta("Q8_0", chunk), HAS_LINEAR_BIAS=False, BLOCK_N=bn, PDL=True, SPLIT=False)
    ptrs = {"x_ptr": "*bf16", "w_ptr": "*u8", "bias_ptr": "*bf16", "out_ptr": "*bf16"}
    sig = {n: ("constexpr" if n in const else ptrs.get(n, "i32")) for n in names}
    div = [n for n in names if n.endswith("_ptr") or n in ("rows",)]
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n in div}
    k = triton.compile(
        ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs),
        target=GPUTarget("cuda", 90, 32),
        options=dict(num_warps=warps),
    )
    report(k, f"generic Q8_0 {(chunk, bn, warps)} (weights a thread {bn * chunk // (32 * warps)})")


build_generic(*gg.FMA_CONFIG["Q8_0"])
