"""The words-form tensor-core kernels compiled for sm_90 on the CPU dev host (no GPU): registers,
spills and SASS op counts per config (the `report` of ../../2026-12-03-h200-mma-sync/aot.py).
Run from the repository root: python bench/results/2026-12-06-h100-split-order/scripts/aot_mma.py"""

import inspect
import sys

sys.path.insert(0, "bench/results/2026-12-03-h200-mma-sync")
import torch

torch.version.cuda = "12.8"  # the CPU build names no CUDA; Triton's backend wants one
import triton
import triton.language as tl
from aot import report
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kvspill.kernels import gguf_mma as g

PTRS = {"x_ptr": "*bf16", "xs_ptr": "*bf16", "w_ptr": "*u8", "bias_ptr": "*bf16", "out_ptr": "*bf16",
        "part_ptr": "*fp32", "counter_ptr": "*i32", "pairs_ptr": "*i32"}


def build(fn, const, warps, stages, name):
    names = list(inspect.signature(fn.fn).parameters)
    sig = {n: ("constexpr" if n in const else PTRS.get(n, "i32")) for n in names}
    div = [n for n in names if (n.endswith("_ptr") or n.startswith("stride")) and n != "stride_w"]
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n in div}
    src = ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))
    return report(k, name)


WORDS = dict(MAGIC=False, HAS_BIAS=False, DOT_DTYPE=tl.bfloat16, WORDS=True, PDL=True)
for t_pad, bn, w, st in ((32, 64, 2, 2), (32, 64, 2, 3), (32, 64, 4, 2), (32, 32, 2, 2), (16, 32, 2, 3), (8, 32, 2, 2)):
    build(g._q6k_mma_kernel, dict(WORDS, T_PAD=t_pad, BLOCK_N=bn, SPLIT_K=8, SPLIT=True), w, st,
          f"Q6_K T{t_pad} block_n {bn} warps {w} stages {st}")
for t_pad, bn, w, st in ((32, 64, 4, 3), (8, 32, 2, 3)):
    build(g._q4k_mma_kernel, dict(WORDS, T_PAD=t_pad, BLOCK_N=bn, SPLIT_K=8, TWO_ACC=True, PAIR_DTYPE=tl.bfloat16),
          w, st, f"Q4_K T{t_pad} block_n {bn} warps {w} stages {st}")
