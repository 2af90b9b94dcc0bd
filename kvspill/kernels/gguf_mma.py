"""Tensor-core quantized GEMM for a few tokens (decode batches): Q4_K.

Shapes:
    quant_matmul_mma: x [num_tokens <= MMA_MAX_TOKENS, in_features] bf16 / fp16 / fp32, weight
                      QuantizedWeight [out_features, in_features] (Q4_K), bias [out_features] or
                      None -> [num_tokens, out_features] in x's dtype

Why: at 2-64 tokens a step still reads every weight once, so it should cost about what one token
costs. The dequantize-then-GEMM path writes and reads a dense copy (3.5x the bytes), and the
CUDA-core GEMV spends one FMA per weight per token. Here (as Marlin does for int4) each program
streams BLOCK_N rows of Q4_K super-blocks once and feeds them to the tensor cores against all
tokens, one 32-weight sub-block at a time:

    out^T[BLOCK_N, T_PAD] += d*sc * (q[BLOCK_N, 32] @ x^T[32, T_PAD]) - dmin*m * sum(x)  (T_PAD: 16, 32, 64)

The integer quants (0..15, exact in bf16 and fp16) go to the tensor cores as they are and the
sub-block's scale multiplies the product afterwards; the min term takes the per-token sum of the
sub-block's x, computed once per call:
    sum_k (d*sc*q_k - dmin*m) x_k = d*sc * sum_k q_k x_k - dmin*m * sum_k x_k.
The `magic` form turns a nibble into 128 + q by OR-ing it into the mantissa of 128.0 (no
int-to-float convert) and subtracts 128 * sum(x) after the dot. Programs split the rows and, with
SPLIT_K > 1, the super-blocks: partial sums are then added into an fp32 output with atomics (the
caller casts it).

Measured (NVIDIA H200, Triton 3.6, 2026-12-02; bench/results/2026-12-02-h200-gguf-mma/): Q4_K at
4-16 tokens, per Llama-3.1-8B shape (qkv / o / gate_up / down / lm_head), us against the previous
path (the dot kernel): 25 / 21 / 82 / 46 / 267 against 38 / 28 / 130 / 88 / 539 at 8 tokens, an 8B
step's projections 5.9 ms against 9.6; 10-27% of the card's copy bandwidth, far from the 80% of
Marlin-class kernels: the dots are small (K = 32 a sub-block) and each program converts its x
tile to the dot layout. At 32-64 tokens the dequantize-then-GEMM path stays faster. The sweep also
tried the dequantize-before-the-dot form, unrolled super-blocks and a Q6_K twin: all slower, so
they are not here (their code: commit afabc76, kernels/gguf_mma.py).

Invariants:
- The result equals dequantize_ref(weight) @ x.T up to fp32 rounding (the quant-times-x products
  are exact in fp32; the magic form adds the rounding of 128 * sum(x) taken back out).
- Weight bytes are read once per launch; rows must be 4-byte aligned (the header is read as words).
- Under Triton's interpreter (CPU tensors) the dots run in fp32: its tl.dot of a bf16 tile made in
  the kernel is wrong (see gguf_gemv._interpreted).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from kvspill.kernels.gguf_formats import QuantizedWeight
from kvspill.kernels.gguf_gemv_lane import _f16_bits
from kvspill.kernels.triton_compat import tl, triton

MMA_MAX_TOKENS = 64
MMA_TYPES = ("Q4_K",)
# A config's split_k applies to weights of at most this many rows (an 8B's qkv, o and down): with
# more, the row tiles alone fill the card and a split only adds the atomics.
SPLIT_K_MAX_ROWS = 8192


@dataclass(frozen=True)
class MmaConfig:
    block_n: int  # weight rows per program
    num_warps: int
    split_k: int = 1  # programs per row tile along K (> 1: fp32 atomics); see SPLIT_K_MAX_ROWS
    num_stages: int = 1
    magic: bool = False  # nibbles become 128 + q by a mantissa OR, not an int-to-float convert


@triton.jit
def _byte(w1, w2, w3, i: tl.constexpr):
    """Byte i (0..11) of Q4_K's scale bytes, held as three little-endian int32 words."""
    if i < 4:
        word = w1
    elif i < 8:
        word = w2
    else:
        word = w3
    return (word >> (8 * (i % 4))) & 0xFF


@triton.jit
def _q4k_scale_min(w1, w2, w3, s: tl.constexpr):
    """(sc, m) of Q4_K sub-block s: 6-bit fields of the 12 scale bytes (ggml's get_scale_min_k4)."""
    if s < 4:
        sc = _byte(w1, w2, w3, s) & 63
        m = _byte(w1, w2, w3, s + 4) & 63
    else:
        sc = (_byte(w1, w2, w3, s + 4) & 0xF) | ((_byte(w1, w2, w3, s - 4) >> 6) << 4)
        m = (_byte(w1, w2, w3, s + 4) >> 4) | ((_byte(w1, w2, w3, s) >> 6) << 4)
    return sc.to(tl.float32), m.to(tl.float32)


@triton.jit
def _as_128_plus(q, DOT_DTYPE: tl.constexpr):
    """The nibbles `q` (0..15) as 128 + q in the dot's dtype, made by OR-ing q into the mantissa
    of 128.0 (no int-to-float convert); the caller subtracts 128 * sum(x) after the dot."""
    if DOT_DTYPE == tl.float32:
        return ((q.to(tl.int32) << 16) | 0x43000000).to(tl.float32, bitcast=True)
    elif DOT_DTYPE == tl.bfloat16:
        return (q.to(tl.int16) | 0x4300).to(tl.bfloat16, bitcast=True)
    else:
        return ((q.to(tl.int16) << 3) | 0x5800).to(tl.float16, bitcast=True)


@triton.jit
def _sub_block(
    acc,
    q,
    dsc,
    dm,
    x_ptr,
    stride_x,
    xs_ptr,
    stride_xs,
    k0,
    t,
    t_ok,
    DOT_DTYPE: tl.constexpr,
    MAGIC: tl.constexpr,
):
    """acc += the 32-weight sub-block at columns k0.. of the program's rows: quants `q` [BLOCK_N,
    32], scale `dsc` and min `dm` [BLOCK_N, 1]; `xs_ptr`: x's sums per sub-block [tokens, K / 32]."""
    kk = tl.arange(0, 32)
    x = tl.load(x_ptr + t[None, :] * stride_x + k0 + kk[:, None], mask=t_ok[None, :], other=0.0)
    x = x.to(DOT_DTYPE)
    xsum = tl.load(xs_ptr + t * stride_xs + k0 // 32, mask=t_ok, other=0.0)[None, :]
    if MAGIC:
        p = tl.dot(_as_128_plus(q, DOT_DTYPE), x, input_precision="ieee") - 128.0 * xsum
    else:
        p = tl.dot(q.to(DOT_DTYPE), x, input_precision="ieee")
    return acc + dsc * p - dm * xsum


@triton.jit
def _super_block(
    acc,
    base,
    n_ok,
    x_ptr,
    stride_x,
    xs_ptr,
    stride_xs,
    k0,
    t,
    t_ok,
    DOT_DTYPE: tl.constexpr,
    MAGIC: tl.constexpr,
):
    """acc += one Q4_K super-block of the program's rows (256 weights a row, 144 bytes at `base`
    [BLOCK_N]): d@0 | dmin@2 | scales[12]@4 | qs[128]@16; sub-block s takes the (s % 2) nibble of
    qs[(s // 2) * 32 : +32]."""
    words = base.to(tl.pointer_type(tl.int32))
    w0 = tl.load(words, mask=n_ok, other=0)
    w1 = tl.load(words + 1, mask=n_ok, other=0)
    w2 = tl.load(words + 2, mask=n_ok, other=0)
    w3 = tl.load(words + 3, mask=n_ok, other=0)
    d = _f16_bits(w0 & 0xFFFF)
    dmin = _f16_bits((w0 >> 16) & 0xFFFF)
    col = tl.arange(0, 32)
    for j in tl.static_range(4):
        qs = tl.load(base[:, None] + 16 + 32 * j + col[None, :], mask=n_ok[:, None], other=0)
        for h in tl.static_range(2):
            sc, m = _q4k_scale_min(w1, w2, w3, 2 * j + h)
            if h == 0:
                q = qs & 0xF
            else:
                q = qs >> 4
            dsc = (d * sc)[:, None]
            dm = (dmin * m)[:, None]
            k = k0 + 64 * j + 32 * h
            acc = _sub_block(
                acc, q, dsc, dm, x_ptr, stride_x, xs_ptr, stride_xs, k, t, t_ok, DOT_DTYPE, MAGIC
            )
    return acc


@triton.jit
def _q4k_mma_kernel(
    x_ptr,
    xs_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    rows,
    num_blocks,
    num_tokens,
    stride_x,
    stride_xs,
    stride_w,
    stride_o,
    T_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT_K: tl.constexpr,
    MAGIC: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    # Grid: (cdiv(rows, BLOCK_N), SPLIT_K). Program (i, s) takes rows [i*BLOCK_N, +BLOCK_N) and the
    # super-blocks s, s + SPLIT_K, ...
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = n < rows
    row_ptr = w_ptr + n.to(tl.int64) * stride_w
    t = tl.arange(0, T_PAD)
    t_ok = t < num_tokens
    acc = tl.zeros((BLOCK_N, T_PAD), dtype=tl.float32)
    for sb in range(pid_k, num_blocks, SPLIT_K):
        base = row_ptr + sb * 144
        acc = _super_block(
            acc, base, n_ok, x_ptr, stride_x, xs_ptr, stride_xs, sb * 256, t, t_ok, DOT_DTYPE, MAGIC
        )
    if HAS_BIAS:
        if pid_k == 0:
            acc += tl.load(bias_ptr + n, mask=n_ok, other=0.0).to(tl.float32)[:, None]
    out = out_ptr + t[None, :] * stride_o + n[:, None]
    mask = n_ok[:, None] & t_ok[None, :]
    if SPLIT_K == 1:
        tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.atomic_add(out, acc, mask=mask, sem="relaxed")


def mma_t_pad(num_tokens: int) -> int:
    """The token tile of `num_tokens` (the dot needs >= 16)."""
    return max(16, triton.next_power_of_2(num_tokens))


def check_mma_args(x: torch.Tensor, weight: QuantizedWeight, bias: torch.Tensor | None) -> None:
    """The shape, type, layout and device contract of `quant_matmul_mma` (asserts only)."""
    assert weight.qtype in MMA_TYPES, f"the tensor-core kernel takes {MMA_TYPES}, got {weight.qtype}"
    assert x.dim() == 2 and x.stride(1) == 1, f"x must be [num_tokens, in_features], got {tuple(x.shape)}"
    assert 1 <= x.shape[0] <= MMA_MAX_TOKENS, f"1..{MMA_MAX_TOKENS} tokens, got {x.shape[0]}"
    assert x.shape[1] == weight.in_features, f"x has {x.shape[1]} features, weight {weight.in_features}"
    assert x.dtype in (torch.float32, torch.float16, torch.bfloat16), f"unsupported x dtype {x.dtype}"
    assert x.device == weight.device, f"x on {x.device}, weight on {weight.device}"
    assert weight.data.data_ptr() % 4 == 0, "Q4_K rows must be 4-byte aligned"
    if bias is not None:
        assert bias.shape == (weight.out_features,) and bias.device == x.device, "bias must be [out_features]"


# Per (type, token count rounded up to a power of two): the config measured fastest on the
# Llama-3.1-8B shapes where it beat the other paths (bench/results/2026-12-02-h200-gguf-mma/).
# A count without an entry keeps its old path (kernels/quant_linear.py): 2 tokens (the lane GEMV
# was 2-2.9x faster than this kernel's first version; the second was not timed there) and 17-64
# (dequantize-then-GEMM is 1.4x faster).
_Q4K_FEW_TOKENS = MmaConfig(block_n=32, num_warps=2, split_k=4, num_stages=3, magic=True)
MMA_CONFIGS: dict[tuple[str, int], MmaConfig] = {("Q4_K", t): _Q4K_FEW_TOKENS for t in (4, 8, 16)}


def mma_config(weight: QuantizedWeight, num_tokens: int) -> MmaConfig | None:
    """The config `quant_linear` runs `num_tokens` tokens of `weight` with, or None: that count
    takes another path."""
    if weight.qtype not in MMA_TYPES or not 2 <= num_tokens <= MMA_MAX_TOKENS:
        return None
    if weight.data.data_ptr() % 4 != 0:
        return None
    config = MMA_CONFIGS.get((weight.qtype, triton.next_power_of_2(num_tokens)))
    if config is not None and weight.out_features > SPLIT_K_MAX_ROWS:
        config = replace(config, split_k=1)
    return config


def quant_matmul_mma(
    x: torch.Tensor,  # [num_tokens <= MMA_MAX_TOKENS, in_features]
    weight: QuantizedWeight,
    bias: torch.Tensor | None = None,  # [out_features]
    config: MmaConfig | None = None,
) -> torch.Tensor:
    """Triton tensor-core x @ W.T (+ bias) -> [num_tokens, out_features] in x's dtype."""
    check_mma_args(x, weight, bias)
    num_tokens, rows = x.shape[0], weight.out_features
    t_pad = mma_t_pad(num_tokens)
    cfg = config or mma_config(weight, num_tokens) or MmaConfig(block_n=32, num_warps=4)
    interpreted = x.device.type == "cpu"
    if cfg.split_k > 1:
        out = torch.zeros((num_tokens, rows), dtype=torch.float32, device=x.device)
    else:
        out = torch.empty((num_tokens, rows), dtype=x.dtype, device=x.device)
    if x.dtype == torch.float32 or interpreted:
        dot_dtype = tl.float32
    else:
        dot_dtype = tl.float16 if x.dtype == torch.float16 else tl.bfloat16
    grid = (triton.cdiv(rows, cfg.block_n), cfg.split_k)
    # The min term (and the magic form's 128 * sum(x)) needs each sub-block's sum of x, per token.
    x_sums = x.float().reshape(num_tokens, -1, 32).sum(-1)
    _q4k_mma_kernel[grid](
        x,
        x_sums,
        weight.data,
        bias if bias is not None else x,
        out,
        rows,
        weight.in_features // 256,
        num_tokens,
        x.stride(0),
        x_sums.stride(0),
        weight.data.stride(0),
        out.stride(0),
        T_PAD=t_pad,
        BLOCK_N=cfg.block_n,
        SPLIT_K=cfg.split_k,
        MAGIC=cfg.magic,
        HAS_BIAS=bias is not None,
        DOT_DTYPE=dot_dtype,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return out if cfg.split_k == 1 else out.to(x.dtype)
