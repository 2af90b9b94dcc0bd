"""Q4_1's tensor-core sub-block form compiled for sm_90 on the dev host (Triton 3.9), beside Q5_K's
(the form and config of its measured MMA_CONFIGS entry): registers, spills, SASS instructions.
    python3 bench/results/2026-12-05-h200-q41-configs/scripts/aot_q41_mma.py"""

import sys, inspect

sys.path.insert(0, "bench/results/2026-12-03-h200-mma-sync")
import torch

torch.version.cuda = "12.8"
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from aot import report
from kvspill.kernels import gguf_mma as gm


def build(fn, t_pad, block_n, warps, stages, split, magic, name, extra=None):
    names = list(inspect.signature(fn.fn).parameters)
    const = dict(
        T_PAD=t_pad,
        BLOCK_N=block_n,
        SPLIT_K=split,
        MAGIC=magic,
        HAS_BIAS=False,
        DOT_DTYPE=tl.bfloat16,
        PDL=True,
        **(extra or {}),
    )
    ptrs = {
        "x_ptr": "*bf16",
        "xs_ptr": "*fp32",
        "w_ptr": "*u8",
        "bias_ptr": "*bf16",
        "out_ptr": "*fp32",
        "part_ptr": "*fp32",
        "counter_ptr": "*i32",
        "pairs_ptr": "*bf16",
    }
    sig = {n: ("constexpr" if n in const else ptrs.get(n, "i32")) for n in names}
    div = [
        n
        for n in names
        if n.endswith("_ptr") or n in ("stride_x", "stride_xs", "stride_o", "rows", "stride_w")
    ]
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n in div}
    k = triton.compile(
        ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs),
        target=GPUTarget("cuda", 90, 32),
        options=dict(num_warps=warps, num_stages=stages),
    )
    report(k, name)


FLAGS = dict(WHOLE=False, WORDS=False, TWO_ACC=False, PAIR_DTYPE=None, Q5=False, Q41=False)
for magic in (False, True):
    build(gm._q4k_mma_kernel, 8, 32, 2, 3, 4, magic, f"q41 t8 n32 w2 s4 magic={magic}", dict(FLAGS, Q41=True))
    build(
        gm._q4k_mma_kernel,
        8,
        32,
        2,
        3,
        4,
        magic,
        f"q5k-as-table t8 n32 w2 s4 magic={magic}",
        dict(FLAGS, Q5=True),
    )
build(gm._q4k_mma_kernel, 32, 64, 4, 3, 1, True, "q41 t32 n64 w4 magic", dict(FLAGS, Q41=True))
