"""Compile kvspill's decode-step kernels (GGUF, fp8, attention, RMSNorm) for sm_90 on a host without a GPU (Triton's whole pipeline:
its front end, TTIR ... PTX, ptxas to a cubin). Run by test_sm90_compile.py in a process of its own
with TRITON_INTERPRET=0: the interpreter the other kernel tests use runs the Python body and skips
the front end's typing rules (a loop variable that shadows a parameter of another type, say), which
only a compile meets. Prints one line a kernel; exits non-zero on the first that fails."""

from __future__ import annotations

import inspect

import torch

# Triton's CUDA backend asks torch which CUDA it was built for; a CPU build has none.
torch.version.cuda = torch.version.cuda or "12.8"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from kvspill.kernels import (  # noqa: E402
    decode_attention,
    fp8_gemv,
    fused_ops,
    gguf_dequant,
    gguf_gemv_int16x,
    gguf_gemv_mixed,
    gguf_mma,
    gguf_mma_words,
    prefill_attention,
)

_POINTERS = {
    "*u8": ("w_ptr", "wa_ptr", "wb_ptr"),
    "*fp32": ("part_ptr",),
    "*i32": ("counter_ptr", "pairs_ptr"),
}


def _arg_type(name: str) -> str:
    for kind, names in _POINTERS.items():
        if name in names:
            return kind
    return "*bf16" if name.endswith("_ptr") else "i32"


def compile_sm90(fn, given: dict, num_warps: int, num_stages: int, types: dict | None = None) -> int:
    """Compile `fn` with the constexprs `given` (the rest at their defaults) for sm_90; returns its
    shared memory bytes. `types`: argument types other than `_arg_type`'s guess (floats, pointers
    of another element type)."""
    params = inspect.signature(fn.fn).parameters
    constexprs = {n: given.get(n, p.default) for n, p in params.items() if "constexpr" in str(p.annotation)}
    missing = [n for n, v in constexprs.items() if v is inspect.Parameter.empty]
    assert not missing, f"{fn.fn.__name__}: give the constexprs {missing}"
    types = types or {}
    signature = {n: "constexpr" if n in constexprs else types.get(n) or _arg_type(n) for n in params}
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    options = dict(num_warps=num_warps, num_stages=num_stages)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options).metadata.shared


WORDS = dict(
    T_PAD=8, BLOCK_N=32, SPLIT_K=8, MAGIC=False, HAS_BIAS=True, DOT_DTYPE=tl.bfloat16, WORDS=True, PDL=True
)
INT16X = dict(HAS_LINEAR_BIAS=True, USE_ASM=True, PDL=True)
CASES = [
    (
        "Q4_K words, split 8",
        gguf_mma._q4k_mma_kernel,
        dict(WORDS, TWO_ACC=True, PAIR_DTYPE=tl.bfloat16),
        2,
        3,
    ),
    (
        "Q4_K sub-block, split 2 (atomics)",
        gguf_mma._q4k_mma_kernel,
        dict(WORDS, SPLIT_K=2, WORDS=False),
        2,
        3,
    ),
    ("Q5_K whole", gguf_mma._q4k_mma_kernel, dict(WORDS, SPLIT_K=1, WORDS=False, WHOLE=True, Q5=True), 4, 1),
    ("Q6_K words, split rows", gguf_mma._q6k_mma_kernel, dict(WORDS, SPLIT=True), 2, 2),
    ("Q4_K int16-x", gguf_gemv_int16x.q4k_int16x_kernel, dict(INT16X, SB=16, BLOCK_N=16), 4, 1),
    (
        "Q4_K int16-x, two tokens",
        gguf_gemv_int16x.q4k_int16x_kernel,
        dict(INT16X, SB=4, BLOCK_N=8, TWO=True),
        2,
        1,
    ),
    (
        "Q6_K int16-x, split rows",
        gguf_gemv_int16x.q6k_int16x_kernel,
        dict(INT16X, NB=8, BLOCK_N=1, SPLIT=True),
        1,
        1,
    ),
    (
        "Q5_K + Q6_K int16-x, one launch",
        gguf_gemv_mixed.q4k_q6k_int16x_kernel,
        dict(INT16X, SB_A=16, BLOCK_N_A=4, NB_B=8, BLOCK_N_B=2, Q5=True, SPLIT_B=True),
        2,
        1,
    ),
]

ATTENTION_TYPES = {
    "scale_ptr": "*fp32",
    "bt_ptr": "*i32",
    "seq_lens_ptr": "*i32",
    "o_ptr": "*fp32",
    "lse_ptr": "*fp32",
    "scale_log2": "fp32",
    "pos_ptr": "*i64",
    "cos_sin_ptr": "*fp32",
    "slot_ptr": "*i64",
}
ATTENTION = dict(
    BLOCK_SIZE=16, GROUP=4, GROUP_PAD=16, HEAD_DIM=128, DOT_PRECISION="ieee", DOT_IN_F32=False, PDL=True
)
FP8_TYPES = {"w_ptr": "*fp8e4nv", "scale_ptr": "*fp32", "eps": "fp32"}
FP8 = dict(
    HAS_BIAS=False,
    USE_DOT=False,
    EVEN_K=True,
    BLOCK_N=16,
    BLOCK_K=512,
    NUM_STAGES=3,
    INTERPRETER=False,
    PDL=True,
)
MERGE_TYPES = {"part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "lse_ptr": "*fp32"}
OTHER_CASES = [
    (
        "decode attention, RoPE and early reads",
        decode_attention._decode_split_kernel,
        dict(ATTENTION, BLOCK_N=64, ROPE=True, EARLY=True),
        4,
        2,
        ATTENTION_TYPES,
    ),
    (
        "decode attention, 32-key tiles",
        decode_attention._decode_split_kernel,
        dict(ATTENTION, BLOCK_N=32),
        2,
        3,
        ATTENTION_TYPES,
    ),
    (
        "decode attention merge",
        decode_attention._decode_merge_kernel,
        dict(DIM_BLOCK=32, SPLITS_PAD=128, PDL=True),
        2,
        1,
        MERGE_TYPES,
    ),
    (
        "fused decode fp8 GEMV, norm folded in",
        fp8_gemv._fp8_gemv_kernel,
        dict(FP8, NORM=True, ROW_BLOCK=4096),
        8,
        3,
        FP8_TYPES,
    ),
    (
        "fp8 GEMV, gated, residual",
        fp8_gemv._fp8_gemv_kernel,
        dict(FP8, GATED=True, RESIDUAL=True),
        4,
        3,
        FP8_TYPES,
    ),
    (
        "prefill attention",
        prefill_attention._prefill_kernel,
        dict(
            BLOCK_SIZE=16,
            GROUP=4,
            HEAD_DIM=128,
            BLOCK_M=128,
            BLOCK_Q=32,
            BLOCK_N=64,
            DOT_PRECISION="ieee",
            DOT_IN_F32=False,
        ),
        4,
        3,
        dict(ATTENTION_TYPES, qsl_ptr="*i32", lse_ptr="*fp32", o_ptr="*bf16"),
    ),
    (
        "Q6_K dequantize (split rows)",
        gguf_dequant._dequant_kernel,
        dict(gguf_dequant.kernel_meta("Q6_K"), BLOCK_N=gguf_dequant.DEQUANT_BLOCK_N, SPLIT=True),
        gguf_dequant.DEQUANT_NUM_WARPS,
        1,
        {},
    ),
    (
        "gated x permutation for the Q4_K words form",
        gguf_mma_words._words_x_kernel,
        dict(Q6K=False, T_PAD=8, PDL=True, GATED=True),
        4,
        1,
        {"counter_ptr": "*i32"},
    ),
    (
        "RMSNorm, residual, early reads",
        fused_ops._rms_norm_kernel,
        dict(HAS_RESIDUAL=True, BLOCK=4096, PDL=True, EARLY=True),
        8,
        1,
        {"eps": "fp32"},
    ),
]

if __name__ == "__main__":
    for label, fn, given, warps, stages in CASES:
        print(f"{label}: {compile_sm90(fn, given, warps, stages)} bytes shared", flush=True)
    for label, fn, given, warps, stages, types in OTHER_CASES:
        print(f"{label}: {compile_sm90(fn, given, warps, stages, types)} bytes shared", flush=True)
