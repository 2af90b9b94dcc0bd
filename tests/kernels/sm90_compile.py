"""Compile every kvspill kernel (GGUF, fp8, attention, norms, RoPE, KV stores, sparse selection,
the tiers' gather) for sm_90 on a host without a GPU (Triton's whole pipeline: its front end, TTIR
... PTX, ptxas to a cubin), each in the configurations the GPU runs. Run by test_sm90_compile.py in
a process of its own with TRITON_INTERPRET=0: the interpreter the other kernel tests use runs the
Python body and skips the front end's typing rules (a loop variable that shadows a parameter of
another type, say), which only a compile meets. Prints one line a case; exits non-zero on the
first that fails, or where a kernel of the package has no case here (a new kernel needs one)."""

from __future__ import annotations

import inspect
import sys

import torch

# Triton's CUDA backend asks torch which CUDA it was built for; a CPU build has none.
torch.version.cuda = torch.version.cuda or "12.8"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from kvspill.kernels import (  # noqa: E402
    block_select,
    decode_attention,
    fp8_gemv,
    fp8_linear,
    fused_ops,
    gguf_dequant,
    gguf_gemv,
    gguf_gemv_int16x,
    gguf_gemv_lane,
    gguf_gemv_mixed,
    gguf_gemv_offset,
    gguf_mma,
    gguf_mma_words,
    greedy_argmax,
    merge_states,
    prefill_attention,
    rope_store,
    sparse_kernels,
    store_kv,
    uva_gather,
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


HANDOFF_TYPES = {"sums_ptr": "*fp32", "eps": "fp32"}  # kernels/norm_handoff.py (part_ptr: *fp32 above)
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
        "fp8 GEMV on a handed-off norm (sums added up before the K loop)",
        fp8_gemv._fp8_gemv_kernel,
        dict(FP8, SUMS=True, SUMS_PAD=512),
        4,
        3,
        dict(FP8_TYPES, sums_ptr="*fp32"),
    ),
    (
        "dense GEMV on a handed-off norm (sums added up after the K loop)",
        fp8_gemv._fp8_gemv_kernel,
        dict(FP8, HAS_SCALE=False, SUMS=True, SUMS_PAD=512),
        4,
        3,
        {"sums_ptr": "*fp32", "eps": "fp32"},
    ),
    (
        "dense GEMV, gated, residual, handing off the next norm",
        fp8_gemv._fp8_gemv_kernel,
        dict(FP8, HAS_SCALE=False, GATED=True, RESIDUAL=True, HANDOFF=True),
        4,
        3,
        {"eps": "fp32"},
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
        dict(Q6K=False, T_PAD=8, ROWS=128, PDL=True, GATED=True),
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
    (
        "Q4_K + Q6_K int16-x, one launch, on a handed-off norm",
        gguf_gemv_mixed.q4k_q6k_int16x_kernel,
        dict(INT16X, SB_A=16, BLOCK_N_A=16, NB_B=16, BLOCK_N_B=4, SUMS=True, SUMS_PAD=512),
        4,
        1,
        HANDOFF_TYPES,
    ),
    (
        "Q4_K int16-x, residual add, handing off the next norm",
        gguf_gemv_int16x.q4k_int16x_kernel,
        dict(INT16X, SB=16, BLOCK_N=8, RESIDUAL=True, HANDOFF=True),
        4,
        1,
        HANDOFF_TYPES,
    ),
    (
        "Q6_K int16-x, split rows, residual add, handing off the next norm",
        gguf_gemv_int16x.q6k_int16x_kernel,
        dict(INT16X, NB=16, BLOCK_N=2, SPLIT=True, RESIDUAL=True, HANDOFF=True),
        4,
        1,
        HANDOFF_TYPES,
    ),
]

LANE = dict(HAS_LINEAR_BIAS=True, USE_ASM=True, X_ASM=True, PDL=True)
ROPE_TYPES = {
    "pos_ptr": "*i64",
    "cache_ptr": "*fp32",
    "cos_sin_ptr": "*fp32",
    "slot_ptr": "*i64",
    "scale_ptr": "*fp32",
}
KV_ROPE = dict(HALF=64, BLOCK_HQ=32, BLOCK_HK=8, PDL=True)
MERGE_STATES_TYPES = {"lse_a_ptr": "*fp32", "lse_b_ptr": "*fp32", "lse_ptr": "*fp32"}
# The other kernels of one or two tokens, the generic GEMVs, the small ops and the KV stores.
SMALL_CASES = [
    ("Q4_1 int16-x", gguf_gemv_int16x.q41_int16x_kernel, dict(INT16X, KL=64, BLOCK_N=16), 4, 1, {}),
    ("Q8_0 int16-x, two tokens", gguf_gemv_int16x.q80_int16x_kernel, dict(INT16X, KL=32, BLOCK_N=8, TWO=True), 4, 1, {}),
    ("Q4_K lanes, two tokens", gguf_gemv_lane.q4k_gemv_kernel, dict(LANE, T_PAD=2, SB=8, BLOCK_N=4, DEQUANT=True), 1, 1, {}),
    ("Q6_K lanes, split rows", gguf_gemv_lane.q6k_gemv_kernel, dict(LANE, T_PAD=4, NSUB=2, BLOCK_N=2, DEQUANT=True, SPLIT=True), 1, 1, {}),
    ("Q4_K one token, offsets", gguf_gemv_offset.q4k_one_token_kernel, dict(LANE, SB=8, BLOCK_N=4), 1, 1, {}),
    ("Q5_K generic FMA", gguf_gemv._gemv_fma_kernel, dict(gguf_dequant.kernel_meta("Q5_K", 1024), HAS_LINEAR_BIAS=True, BLOCK_N=4, PDL=True), 1, 1, {}),
    ("Q4_0 generic dot", gguf_gemv._gemv_dot_kernel, dict(gguf_dequant.kernel_meta("Q4_0", 256), T_PAD=16, HAS_LINEAR_BIAS=False, DOT_F32=False, BLOCK_N=16, PDL=True), 2, 1, {}),
    ("SiLU and mul", fused_ops._silu_and_mul_kernel, dict(BLOCK=1024, PDL=True), 4, 1, {}),
    ("RoPE", fused_ops._rope_kernel, dict(HALF=64, BLOCK_HQ=32, BLOCK_HK=8, PDL=True), 4, 1, ROPE_TYPES),
    ("RoPE and the K/V store, fp8 KV", rope_store._rope_store_kernel, dict(KV_ROPE, FP8_MAX=448.0), 4, 1, dict(ROPE_TYPES, cache_ptr="*fp8e4nv")),
    ("K/V store, int8 KV", store_kv._store_kv_kernel, dict(NUM_KV_HEADS=8, HEAD_DIM=128, BLOCK_H=8, INT8=True), 4, 1, dict(ROPE_TYPES, cache_ptr="*i8")),
    ("attention states merge", merge_states._merge_kernel, dict(HEAD_DIM=128, BLOCK_H=32), 4, 1, MERGE_STATES_TYPES),
    ("fp8 row quantization", fp8_linear._quantize_rows_kernel, dict(EPS_=fp8_linear.EPS, FP8_MAX_=fp8_linear.FP8_MAX, INTERPRETER=False, BLOCK=4096), 8, 1, {"q_ptr": "*fp8e4nv", "scale_ptr": "*fp32"}),
]  # fmt: skip

SELECT_TYPES = {
    "keys_ptr": "*i64",
    "cand_ptr": "*i64",
    "best_ptr": "*i32",
    "top_ptr": "*i64",
    "rank_ptr": "*i32",
    "out_ptr": "*i64",
    "budget": "i32",
}
SPARSE_TYPES = {
    "cpu_ptr": "*bf16",
    "disk_ptr": "*bf16",
    "tiers_ptr": "*i64",
    "ids_ptr": "*i64",
    "out_ptr": "*i64",
    "count_ptr": "*i64",
    "stride_b": "i64",
}
CACHE_UPDATE_TYPES = {
    "slot_of_ptr": "*i32",
    "slot_block_ptr": "*i64",
    "pos_ptr": "*i64",
    "logical_ptr": "*i64",
    "ids_ptr": "*i64",
    "src_ids_ptr": "*i64",
    "kept_ptr": "*i32",
    "free_ptr": "*i32",
    "table_ptr": "*i32",
    "copy_dst_ptr": "*i64",
    "copied_ptr": "*i64",
}
# Sparse mode's block selection and cache, and the tiers' gather of host blocks.
SPARSE_CASES = [
    ("block selection: a chunk's top keys", block_select._chunk_top_kernel, dict(NP=4096, BP=64), 8, 1, SELECT_TYPES),
    ("block selection: a head's top keys", block_select._head_top_kernel, dict(NP=4096, BP=64, RB=32, SINGLE=False, RANK_BY_SORT=False), 8, 1, SELECT_TYPES),
    ("block selection: the union", block_select._union_kernel, dict(NP=1024, LOG_BP=6), 4, 1, SELECT_TYPES),
    ("block selection: the union of entries", block_select._union_entries_kernel, dict(KVH=8, BP=64, LOG_BP=6), 4, 1, SELECT_TYPES),
    ("sparse block keys", sparse_kernels._block_keys_kernel, dict(KVH=8, GROUP=4, D=128, BN=sparse_kernels._BLOCKS_PER_PROGRAM, CPU_TIER=1, HAS_COUNT=True, SCORE_MASK=sparse_kernels._SCORE_MASK), 4, 1, SPARSE_TYPES),
    ("sparse cache update", sparse_kernels._cache_update_kernel, dict(KP=64, SP=256), 4, 1, CACHE_UPDATE_TYPES),
    ("logits widened and their greedy argmax", greedy_argmax._widen_argmax_kernel, dict(CHUNK=1024, CHUNKS_PAD=128, WIDEN=True, PDL=True), 4, 1, {"wide_ptr": "*fp32", "part_max_ptr": "*fp32", "part_arg_ptr": "*i32", "counter_ptr": "*i32", "ids_ptr": "*i64"}),
    ("host block gather", uva_gather._gather_loop_kernel, dict(BLOCK_ELEMS=65536, CHUNK=uva_gather._CHUNK, HAS_SLOTS=True, NUM_PROGRAMS=33), 4, 1, {"ids_ptr": "*i64", "slots_ptr": "*i64"}),
]  # fmt: skip


def compiled_kernels() -> set[str]:
    """`module.kernel` of every kernel this script compiles (test_sm90_compile checks the package's
    kernels against it)."""
    cases = [(fn, label) for label, fn, *_ in CASES + OTHER_CASES + SMALL_CASES + SPARSE_CASES]
    return {f"{fn.fn.__module__.rsplit('.', 1)[-1]}.{fn.fn.__name__}" for fn, _ in cases}


def package_kernels() -> set[str]:
    """`module.kernel` of every `@triton.jit` function named `*kernel` in kvspill.kernels."""
    import importlib
    import pkgutil

    import kvspill.kernels

    found = set()
    for info in pkgutil.iter_modules(kvspill.kernels.__path__):
        module = importlib.import_module(f"kvspill.kernels.{info.name}")
        for name, value in vars(module).items():
            jitted = isinstance(value, triton.runtime.JITFunction) and value.fn.__module__ == module.__name__
            if jitted and name.endswith("kernel"):
                found.add(f"{info.name}.{name}")
    return found


if __name__ == "__main__":
    for label, fn, given, warps, stages in CASES:
        print(f"{label}: {compile_sm90(fn, given, warps, stages)} bytes shared", flush=True)
    for label, fn, given, warps, stages, types in OTHER_CASES + SMALL_CASES + SPARSE_CASES:
        print(f"{label}: {compile_sm90(fn, given, warps, stages, types)} bytes shared", flush=True)
    not_compiled = sorted(package_kernels() - compiled_kernels())
    print(f"{len(compiled_kernels())} kernels compiled", flush=True)
    if not_compiled:
        sys.exit(f"kernels with no case here (add one): {', '.join(not_compiled)}")
