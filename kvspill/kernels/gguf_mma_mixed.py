"""One tensor-core launch for a fused projection of Q4_K rows then Q6_K rows at 3-32 tokens.

The batched twin of kernels/gguf_gemv_mixed.py: a Q4_K_M layer's qkv is Q4_K q and k beside a
Q6_K v (model/quant.QuantLinear's parts), which a decode batch ran as two words-form launches
(kernels/gguf_mma.py), the small v one mostly ramp and tail. Here one grid runs both: programs
below `programs_a` are `_q4k_mma_kernel`'s (split = pid % SPLIT_K_A, row tile = pid // SPLIT_K_A:
the launch order of its own (SPLIT_K, tiles) grid), the rest `_q6k_mma_kernel`'s on part B's rows,
each writing its columns of one output. Each part keeps its own config (rows a tile, split, two
accumulators) and its own x permutation (`words_x`), partials and split counters, so every row
sums as its own kernel sums it: the output is bit-equal to the two launches. One launch has one
warp count and one pipeline depth: the parts' configs must share the warps (`mixed_mma_configs`);
the depth is part A's.

Shapes: x [tokens, K] bf16 / fp16 (rows contiguous), tokens 3..32 where both parts' configs are
the words form; part A [rows_a, K] Q4_K, part B [rows_b, K] Q6_K; out [tokens, rows_a + rows_b].
`KVSPILL_MIXED_MMA=0` takes the two launches.
"""

from __future__ import annotations

import torch

from kvspill.env import switch_on
from kvspill.kernels.gguf_formats import QuantizedWeight
from kvspill.kernels.gguf_mma import (
    dot_dtype,
    mma_outputs,
    mma_t_pad,
    q4k_mma_program,
    q6k_mma_program,
    words_scale_pairs,
)
from kvspill.kernels.gguf_mma_configs import MmaConfig, for_shape, mma_config
from kvspill.kernels.gguf_mma_words import words_x
from kvspill.kernels.pdl import pdl_meta
from kvspill.kernels.triton_compat import tl, triton


@triton.jit
def q4k_q6k_mma_kernel(
    xs_a,  # part A's permuted x (`words_x`, Q4_K)
    xs_b,  # part B's (Q6_K)
    wa_ptr,
    wb_ptr,
    bias_ptr,
    out_ptr,
    rows_a,
    rows_b,
    programs_a,
    num_blocks,
    num_tokens,
    stride_wa,
    stride_wb,
    stride_o,
    part_a,  # each part's fp32 partials and split counters (`gguf_mma.mma_outputs`)
    part_b,
    counter_a,
    counter_b,
    pairs_a,  # part A's scale pairs (PAIR_DTYPE), else unused
    T_PAD: tl.constexpr,
    BLOCK_N_A: tl.constexpr,
    SPLIT_K_A: tl.constexpr,
    TWO_ACC_A: tl.constexpr,
    BLOCK_N_B: tl.constexpr,
    SPLIT_K_B: tl.constexpr,
    TWO_ACC_B: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    PDL: tl.constexpr = False,
    PAIR_DTYPE: tl.constexpr = None,
    SPLIT_B: tl.constexpr = False,  # part B's rows in the split layout
):
    # Grid: (programs_a + SPLIT_K_B * cdiv(rows_b, BLOCK_N_B),); x_ptr and stride_x of the
    # programs are unused by the words form (it reads xs), so xs stands in for them.
    pid = tl.program_id(0)
    if pid < programs_a:
        q4k_mma_program(
            pid % SPLIT_K_A,
            pid // SPLIT_K_A,
            xs_a,
            xs_a,
            wa_ptr,
            bias_ptr,
            out_ptr,
            rows_a,
            num_blocks,
            num_tokens,
            0,
            0,
            stride_wa,
            stride_o,
            part_a,
            counter_a,
            pairs_a,
            T_PAD,
            BLOCK_N_A,
            SPLIT_K_A,
            False,
            HAS_BIAS,
            DOT_DTYPE,
            False,
            True,
            TWO_ACC_A,
            PDL,
            PAIR_DTYPE,
            False,
            False,
        )
    else:
        pid_b = pid - programs_a
        q6k_mma_program(
            pid_b % SPLIT_K_B,
            pid_b // SPLIT_K_B,
            xs_b,
            xs_b,
            wb_ptr,
            bias_ptr + rows_a,
            out_ptr + rows_a,
            rows_b,
            num_blocks,
            num_tokens,
            0,
            0,
            stride_wb,
            stride_o,
            part_b,
            counter_b,
            pairs_a,
            T_PAD,
            BLOCK_N_B,
            SPLIT_K_B,
            False,
            HAS_BIAS,
            DOT_DTYPE,
            False,
            True,
            TWO_ACC_B,
            PDL,
            None,
            SPLIT_B,
        )


# Part B's config by token tile where its own (gguf_mma_configs.MMA_CONFIGS) has other warps than
# part A's; None: the two launches at that count.
MIXED_Q6K_MMA_CONFIGS: dict[int, MmaConfig | None] = {}


def mixed_mma_configs(x: torch.Tensor, parts: list[QuantizedWeight]) -> tuple[MmaConfig, MmaConfig] | None:
    """(part A's, part B's) configs as the mixed kernel runs them (`for_shape` applied) where
    `mixed_mma(x, parts, ...)` applies: CUDA, 3-32 tokens of bf16 / fp16, two parts Q4_K then Q6_K
    whose configs at this count are the words form with one warp count, KVSPILL_MIXED_MMA not 0;
    else None."""
    if len(parts) != 2 or x.dtype not in (torch.bfloat16, torch.float16) or x.stride(-1) != 1:
        return None
    a, b = parts
    num_tokens = x.shape[0]
    if a.qtype != "Q4_K" or b.qtype != "Q6_K" or not 3 <= num_tokens <= 32:
        return None
    config_a, config_b = mma_config(a, num_tokens), mma_config(b, num_tokens)
    tile = triton.next_power_of_2(num_tokens)
    if config_b is not None and tile in MIXED_Q6K_MMA_CONFIGS:
        config_b = MIXED_Q6K_MMA_CONFIGS[tile]
        config_b = None if config_b is None else for_shape(config_b, b.out_features, b.in_features)
    if config_a is None or config_b is None or not (config_a.words and config_b.words):
        return None
    if config_a.num_warps != config_b.num_warps or not switch_on("MIXED_MMA"):
        return None
    return config_a, config_b


def mixed_mma(
    x: torch.Tensor,  # [tokens, K]
    parts: list[QuantizedWeight],  # [Q4_K part, Q6_K part]
    bias: torch.Tensor | None,  # [rows_a + rows_b]
    out: torch.Tensor,  # [tokens, rows_a + rows_b], rows contiguous
    configs: tuple[MmaConfig, MmaConfig],  # `mixed_mma_configs(x, parts)`
) -> torch.Tensor:
    """x @ [A; B].T (+ bias) into out in one tensor-core launch (module docstring)."""
    a, b = parts
    (config_a, config_b), (rows_a, rows_b) = configs, (a.out_features, b.out_features)
    assert out.shape == (x.shape[0], rows_a + rows_b) and out.stride(1) == 1 and out.dtype == x.dtype
    assert bias is None or bias.shape == (rows_a + rows_b,)
    t_pad = mma_t_pad(x.shape[0])
    _, part_a, counter_a = mma_outputs(x, rows_a, config_a, out[:, :rows_a])
    _, part_b, counter_b = mma_outputs(x, rows_b, config_b, out[:, rows_a:])
    split_a = config_a.split_k > 1
    xs_a = words_x(x, "Q4_K", t_pad, counter_a if split_a else None)
    xs_b = words_x(x, "Q6_K", t_pad, counter_b if config_b.split_k > 1 else None)
    pairs = words_scale_pairs(a, config_a, x)
    programs_a = config_a.split_k * triton.cdiv(rows_a, config_a.block_n)
    grid = (programs_a + config_b.split_k * triton.cdiv(rows_b, config_b.block_n),)
    q4k_q6k_mma_kernel[grid](
        xs_a,
        xs_b,
        a.data,
        b.data,
        bias if bias is not None else x,
        out,
        rows_a,
        rows_b,
        programs_a,
        a.in_features // 256,
        x.shape[0],
        a.data.stride(0),
        b.data.stride(0),
        out.stride(0),
        part_a,
        part_b,
        counter_a,
        counter_b,
        pairs if pairs is not None else x,
        T_PAD=t_pad,
        BLOCK_N_A=config_a.block_n,
        SPLIT_K_A=config_a.split_k,
        TWO_ACC_A=config_a.two_acc,
        BLOCK_N_B=config_b.block_n,
        SPLIT_K_B=config_b.split_k,
        TWO_ACC_B=config_b.two_acc,
        HAS_BIAS=bias is not None,
        DOT_DTYPE=dot_dtype(x),
        PAIR_DTYPE=None if pairs is None else (tl.float16 if x.dtype == torch.float16 else tl.bfloat16),
        SPLIT_B=b.split,
        num_warps=config_a.num_warps,
        num_stages=config_a.num_stages,
        **pdl_meta(x.device),
    )
    return out
