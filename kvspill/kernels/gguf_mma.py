"""Tensor-core quantized GEMM for a few tokens (decode batches, short prefill chunks): Q4_K, Q6_K.

Shapes:
    quant_matmul_mma: x [num_tokens <= MMA_MAX_TOKENS, in_features] bf16 / fp16 / fp32, weight
                      QuantizedWeight [out_features, in_features] (Q4_K or Q6_K), bias
                      [out_features] or None -> [num_tokens, out_features] in x's dtype

Why: at 2-64 tokens a step still reads every weight once, so it should cost about what one token
costs. The dequantize-then-GEMM path writes and reads a dense copy (3.5x the bytes), and the
CUDA-core GEMV spends one FMA per weight per token. Here (as Marlin does for int4) each program
streams BLOCK_N rows of GGUF blocks once and feeds them to the tensor cores against all tokens:

    out^T[BLOCK_N, T_PAD] += W[BLOCK_N, k-tile] @ x^T[k-tile, T_PAD]      (T_PAD: 16, 32 or 64)

per sub-block (Q4_K: 32 weights, Q6_K: 16). The integer quants go to the tensor cores as they are
(0..15, or -32..31: exact in bf16 and fp16) and the sub-block's scale multiplies the [BLOCK_N,
T_PAD] product afterwards (`SCALE_AFTER`), with Q4_K's min term taken from the per-token sum of
the sub-block's x:
    sum_k (d*sc*q_k - dmin*m) x_k = d*sc * sum_k q_k x_k - dmin*m * sum_k x_k;
the other form (`SCALE_AFTER=False`) dequantizes the tile in registers to x's dtype first (as a
dense layer would hold the weight) and takes one dot per 32 weights.
The `magic` form turns a nibble into 128 + q by OR-ing it into the mantissa of 128.0 (no
int-to-float convert) and subtracts 128 * sum(x) after the dot; the sums of x per sub-block are
computed once per call, not per program. Programs split the rows and, with SPLIT_K > 1, the
super-blocks: partial sums are then added into an fp32 output with atomics (the caller casts it).

Measured (NVIDIA H200, Triton 3.6, 2026-12-02; bench/results/2026-12-02-h200-gguf-mma/): Q4_K at
4-16 tokens, per Llama-3.1-8B shape (qkv / o / gate_up / down / lm_head), us against the previous
path (the dot kernel): 25 / 21 / 82 / 46 / 267 against 38 / 28 / 130 / 88 / 539 at 8 tokens, an 8B
step's projections 5.9 ms against 9.6; 10-27% of the card's copy bandwidth, far from the 80% of
Marlin-class kernels: the dots are small (K = 32 a sub-block) and each program converts its x
tile to the dot layout. At 32-64 tokens the dequantize-then-GEMM path stays faster.

Invariants:
- With SCALE_AFTER the result equals dequantize_ref(weight) @ x.T up to fp32 rounding (the
  quant-times-x products are exact in fp32; the magic form adds the rounding of 128 * sum(x)
  taken back out); without, the dequantized weight is rounded to x's dtype first.
- Weight bytes are read once per launch.
- Q4_K needs 4-byte aligned rows (its header is read as words); Q6_K reads bytes.
- Under Triton's interpreter (CPU tensors) the dots run in fp32: its tl.dot of a bf16 tile made in
  the kernel is wrong (see gguf_gemv._interpreted).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from kvspill.kernels.gguf_formats import QuantizedWeight
from kvspill.kernels.triton_compat import tl, triton

MMA_MAX_TOKENS = 64
MMA_TYPES = ("Q4_K", "Q6_K")
# A config's split_k applies to weights of at most this many rows (an 8B's qkv, o and down): with
# more, the row tiles alone fill the card and a split only adds the atomics.
SPLIT_K_MAX_ROWS = 8192


@dataclass(frozen=True)
class MmaConfig:
    block_n: int  # weight rows per program
    num_warps: int
    split_k: int = 1  # programs per row tile along K (> 1: fp32 atomics); see SPLIT_K_MAX_ROWS
    scale_after: bool = True  # the sub-block scale multiplies the dot's result, not the weights
    unroll: int = 1  # super-blocks per loop iteration (their loads issued together)
    num_stages: int = 1
    magic: bool = False  # Q4_K nibbles become 128 + q by a mantissa OR, not an int-to-float convert


@triton.jit
def _f16_at(word, shift: tl.constexpr):
    """The fp16 number at bits [shift, shift + 16) of int32 `word`, as float32."""
    return ((word >> shift) & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)


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
def _x_tile(x_ptr, stride_x, k0, t, t_ok, K: tl.constexpr, DOT_DTYPE: tl.constexpr):
    """x^T [K, T_PAD] for columns k0 .. k0 + K, in the dot's dtype; zeros past the last token and,
    as `t_ok` is false there, in an unrolled step past the last super-block."""
    kk = tl.arange(0, K)
    x = tl.load(x_ptr + t[None, :] * stride_x + k0 + kk[:, None], mask=t_ok[None, :], other=0.0)
    return x.to(DOT_DTYPE)


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
def _q4k_group(
    acc,
    q,
    sc,
    m,
    d,
    dmin,
    x_ptr,
    stride_x,
    xs_ptr,
    stride_xs,
    k0,
    t,
    t_ok,
    DOT_DTYPE: tl.constexpr,
    SCALE_AFTER: tl.constexpr,
    MAGIC: tl.constexpr,
):
    """acc += this 32-weight sub-block's rows (quants `q` [BLOCK_N, 32]) times x's columns k0..;
    `xs_ptr`: the sums of x over each sub-block [tokens, in_features // 32], fp32."""
    x = _x_tile(x_ptr, stride_x, k0, t, t_ok, 32, DOT_DTYPE)
    dsc = (d * sc)[:, None]
    dm = (dmin * m)[:, None]
    if SCALE_AFTER:
        xsum = tl.load(xs_ptr + t * stride_xs + k0 // 32, mask=t_ok, other=0.0)[None, :]
        if MAGIC:
            p = tl.dot(_as_128_plus(q, DOT_DTYPE), x, input_precision="ieee") - 128.0 * xsum
        else:
            p = tl.dot(q.to(DOT_DTYPE), x, input_precision="ieee")
        acc += dsc * p - dm * xsum
    else:
        w = (dsc * q.to(tl.float32) - dm).to(DOT_DTYPE)
        acc = tl.dot(w, x, acc, input_precision="ieee")
    return acc


@triton.jit
def _q4k_superblock(
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
    SCALE_AFTER: tl.constexpr,
    MAGIC: tl.constexpr,
):
    """acc += one Q4_K super-block (256 weights a row, 144 bytes at `base` [BLOCK_N])."""
    words = base.to(tl.pointer_type(tl.int32))
    w0 = tl.load(words, mask=n_ok, other=0)
    w1 = tl.load(words + 1, mask=n_ok, other=0)
    w2 = tl.load(words + 2, mask=n_ok, other=0)
    w3 = tl.load(words + 3, mask=n_ok, other=0)
    d = _f16_at(w0, 0)
    dmin = _f16_at(w0, 16)
    col = tl.arange(0, 32)
    for j in tl.static_range(4):
        qs = tl.load(base[:, None] + 16 + 32 * j + col[None, :], mask=n_ok[:, None], other=0)
        sc, m = _q4k_scale_min(w1, w2, w3, 2 * j)
        acc = _q4k_group(
            acc,
            qs & 0xF,
            sc,
            m,
            d,
            dmin,
            x_ptr,
            stride_x,
            xs_ptr,
            stride_xs,
            k0 + 64 * j,
            t,
            t_ok,
            DOT_DTYPE,
            SCALE_AFTER,
            MAGIC,
        )
        sc, m = _q4k_scale_min(w1, w2, w3, 2 * j + 1)
        acc = _q4k_group(
            acc,
            qs >> 4,
            sc,
            m,
            d,
            dmin,
            x_ptr,
            stride_x,
            xs_ptr,
            stride_xs,
            k0 + 64 * j + 32,
            t,
            t_ok,
            DOT_DTYPE,
            SCALE_AFTER,
            MAGIC,
        )
    return acc


@triton.jit
def _q6k_quants(base, n_ok, half: tl.constexpr, g: tl.constexpr, col, WIDTH: tl.constexpr):
    """Q6_K quants minus 32, [BLOCK_N, WIDTH], of weights 128*half + 32*g + col (col < 32):
    4 bits of ql (low or high nibble), 2 bits of qh (ggml's dequantize_row_q6_K)."""
    ql = tl.load(base[:, None] + 64 * half + 32 * (g % 2) + col[None, :], mask=n_ok[:, None], other=0)
    qh = tl.load(base[:, None] + 128 + 32 * half + col[None, :], mask=n_ok[:, None], other=0)
    if g < 2:
        low = ql & 0xF
    else:
        low = ql >> 4
    q = (low | (((qh >> (2 * g)) & 3) << 4)).to(tl.int32) - 32
    return q


@triton.jit
def _q6k_superblock(
    acc, base, n_ok, x_ptr, stride_x, k0, t, t_ok, DOT_DTYPE: tl.constexpr, SCALE_AFTER: tl.constexpr
):
    """acc += one Q6_K super-block (256 weights a row, 210 bytes at `base` [BLOCK_N])."""
    d = tl.load((base + 208).to(tl.pointer_type(tl.float16)), mask=n_ok, other=0.0).to(tl.float32)
    for half in tl.static_range(2):
        for g in tl.static_range(4):
            s0 = 8 * half + 2 * g  # sub-blocks s0 (cols 0..15) and s0 + 1 (cols 16..31)
            sc0 = tl.load(base + 192 + s0, mask=n_ok, other=0).to(tl.int8, bitcast=True).to(tl.float32)
            sc1 = tl.load(base + 193 + s0, mask=n_ok, other=0).to(tl.int8, bitcast=True).to(tl.float32)
            k = k0 + 128 * half + 32 * g
            if SCALE_AFTER:
                col = tl.arange(0, 16)
                for part in tl.static_range(2):
                    q = _q6k_quants(base, n_ok, half, g, col + 16 * part, 16)
                    x = _x_tile(x_ptr, stride_x, k + 16 * part, t, t_ok, 16, DOT_DTYPE)
                    p = tl.dot(q.to(DOT_DTYPE), x, input_precision="ieee")
                    sc = sc0 if part == 0 else sc1
                    acc += (d * sc)[:, None] * p
            else:
                col = tl.arange(0, 32)
                q = _q6k_quants(base, n_ok, half, g, col, 32)
                scale = tl.where(col[None, :] < 16, (d * sc0)[:, None], (d * sc1)[:, None])
                w = (scale * q.to(tl.float32)).to(DOT_DTYPE)
                x = _x_tile(x_ptr, stride_x, k, t, t_ok, 32, DOT_DTYPE)
                acc = tl.dot(w, x, acc, input_precision="ieee")
    return acc


@triton.jit
def _gguf_mma_kernel(
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
    Q6K: tl.constexpr,
    T_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT_K: tl.constexpr,
    UNROLL: tl.constexpr,
    SCALE_AFTER: tl.constexpr,
    MAGIC: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    # Grid: (cdiv(rows, BLOCK_N), SPLIT_K). Program (i, s) takes rows [i*BLOCK_N, +BLOCK_N) and
    # super-blocks s*UNROLL + j*SPLIT_K*UNROLL + u.
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = n < rows
    row_ptr = w_ptr + n.to(tl.int64) * stride_w
    t = tl.arange(0, T_PAD)
    t_ok = t < num_tokens
    acc = tl.zeros((BLOCK_N, T_PAD), dtype=tl.float32)
    for sb0 in range(pid_k * UNROLL, num_blocks, SPLIT_K * UNROLL):
        for u in tl.static_range(UNROLL):
            sb = sb0 + u
            ok = n_ok & ((n * 0 + sb) < num_blocks)
            x_ok = t_ok & ((t * 0 + sb) < num_blocks)
            if Q6K:
                acc = _q6k_superblock(
                    acc, row_ptr + sb * 210, ok, x_ptr, stride_x, sb * 256, t, x_ok, DOT_DTYPE, SCALE_AFTER
                )
            else:
                acc = _q4k_superblock(
                    acc,
                    row_ptr + sb * 144,
                    ok,
                    x_ptr,
                    stride_x,
                    xs_ptr,
                    stride_xs,
                    sb * 256,
                    t,
                    x_ok,
                    DOT_DTYPE,
                    SCALE_AFTER,
                    MAGIC,
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
    assert weight.qtype != "Q4_K" or weight.data.data_ptr() % 4 == 0, "Q4_K rows must be 4-byte aligned"
    if bias is not None:
        assert bias.shape == (weight.out_features,) and bias.device == x.device, "bias must be [out_features]"


# Per (type, token count rounded up to a power of two): the config measured fastest on the
# Llama-3.1-8B shapes where it beat the other paths (bench/results/2026-12-02-h200-gguf-mma/).
# A count without an entry keeps its old path (kernels/quant_linear.py): 2 tokens of Q4_K (the lane
# GEMV was 2-2.9x faster than this kernel's first version; the second was not timed there), 17-64
# (dequantize-then-GEMM is 1.4x faster), Q6_K (the first version was slower at 8 and 64 tokens).
_Q4K_FEW_TOKENS = MmaConfig(block_n=32, num_warps=2, split_k=4, num_stages=3, magic=True)
MMA_CONFIGS: dict[tuple[str, int], MmaConfig] = {("Q4_K", t): _Q4K_FEW_TOKENS for t in (4, 8, 16)}


def mma_config(weight: QuantizedWeight, num_tokens: int) -> MmaConfig | None:
    """The config `quant_linear` runs `num_tokens` tokens of `weight` with, or None: that count
    takes another path."""
    if weight.qtype not in MMA_TYPES or not 2 <= num_tokens <= MMA_MAX_TOKENS:
        return None
    if weight.qtype == "Q4_K" and weight.data.data_ptr() % 4 != 0:
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
    # Q4_K's min term (and the magic form's 128 * sum(x)) needs each sub-block's sum of x, per token.
    x_sums = x.float().reshape(num_tokens, -1, 32).sum(-1) if weight.qtype == "Q4_K" else x
    _gguf_mma_kernel[grid](
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
        Q6K=weight.qtype == "Q6_K",
        T_PAD=t_pad,
        BLOCK_N=cfg.block_n,
        SPLIT_K=cfg.split_k,
        UNROLL=cfg.unroll,
        SCALE_AFTER=cfg.scale_after,
        MAGIC=cfg.magic,
        HAS_BIAS=bias is not None,
        DOT_DTYPE=dot_dtype,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return out if cfg.split_k == 1 else out.to(x.dtype)
