"""One launch for a fused projection of two GGUF types at one token: Q4_K (or Q5_K) rows, then Q6_K.

A Q4_K_M (Q5_K_M) file keeps attn_v in Q6_K in half the layers, so those layers' fused qkv_proj is
two weights (model/quant.QuantLinear's parts): q and k in Q4_K, v in Q6_K. One token ran them as
two int16-x GEMVs, one after the other; here one grid runs both: programs [0, programs_a) are
q4k_int16x_kernel's on part A's rows, the rest q6k_int16x_kernel's on part B's, each writing its
columns of one output. The v weight (1024 x 4096 Q6_K: 3.4 MB on an 8B) is too small to fill the
card alone, so its launch was mostly ramp and tail; in one grid its programs run beside q and k's:
the 8B layer's pair 15.65 -> 7.85 us, random 8B Q4_K_M at 8K 2.800 -> 2.727 ms a step (H100,
2026-12-06, bench/results/2026-12-06-mixed-qkv).

Shapes: x [1, K] bf16 / fp16 (contiguous); part A [rows_a, K] Q4_K or Q5_K, part B [rows_b, K]
Q6_K (gguf's layout or split); bias [rows_a + rows_b] or None -> out [1, rows_a + rows_b].

Both parts run with part A's warps (one launch has one count): part B's rows a program and K step
come from MIXED_Q6K_CONFIGS for that count. Each program computes exactly what the part's own
kernel computes for its rows (the same lanes, x rounding and sums), so the output is bit-equal to
the two launches. `KVSPILL_MIXED_GEMV=0` takes the two launches.
"""

from __future__ import annotations

import torch

from kvspill.env import switch_on
from kvspill.kernels.fp8_gemv import GemvFusion
from kvspill.kernels.gguf_formats import QuantizedWeight
from kvspill.kernels.gguf_gemv import int16x_fusion_meta, int16x_one_token_config
from kvspill.kernels.gguf_gemv_int16x import q4k_int16x_program, q6k_int16x_program
from kvspill.kernels.pdl import pdl_meta
from kvspill.kernels.triton_compat import tl, triton

# Part B's (CHUNK, BLOCK_N) by part A's warp count. On the 8B file's layer (q+k 5120 x 4096, v 1024
# x 4096 split; CUDA-graph replays past L2, PDL on; H100, 2026-12-06, bench/results/2026-12-06-mixed-qkv)
# the pair took 15.65 us as two launches; in one, 4 warps (Q4_K's (4096, 16, 4)): (4096, 4) 7.85,
# (2048, 4) 8.15, (4096, 2) 8.24, (2048, 2) 8.39, (2048, 8) 9.00, 1024-wide steps 14.3-14.7; 2 warps
# (Q5_K's (4096, 4, 2)): 13.26 -> (2048, 2) 8.53, (4096, 2) 8.56, 1 row 9.05-9.20. 1 and 8 warps
# (no 8B shape's part A has them) keep a warp a row on 2048-wide steps, untimed.
MIXED_Q6K_CONFIGS: dict[int, tuple[int, int]] = {1: (2048, 1), 2: (2048, 2), 4: (4096, 4), 8: (2048, 8)}


@triton.jit
def q4k_q6k_int16x_kernel(
    x_ptr,
    wa_ptr,
    wb_ptr,
    bias_ptr,
    out_ptr,
    rows_a,
    rows_b,
    programs_a,
    num_blocks,
    stride_wa,
    stride_wb,
    HAS_LINEAR_BIAS: tl.constexpr,
    SB_A: tl.constexpr,
    BLOCK_N_A: tl.constexpr,
    NB_B: tl.constexpr,
    BLOCK_N_B: tl.constexpr,
    USE_ASM: tl.constexpr,
    PDL: tl.constexpr = False,
    Q5: tl.constexpr = False,  # part A in Q5_K
    SPLIT_B: tl.constexpr = False,  # part B's rows in the split layout
    sums_ptr=None,  # SUMS: x is a handed-off norm's (norm_handoff.NormHandoff), these its sums
    num_sums=1,
    eps=0.0,
    SUMS: tl.constexpr = False,
    SUMS_PAD: tl.constexpr = 1,
):
    # Grid: (programs_a + cdiv(rows_b, BLOCK_N_B),).
    pid = tl.program_id(0)
    if pid < programs_a:
        q4k_int16x_program(
            pid,
            x_ptr,
            wa_ptr,
            bias_ptr,
            out_ptr,
            rows_a,
            num_blocks,
            stride_wa,
            0,
            0,
            HAS_LINEAR_BIAS,
            SB_A,
            BLOCK_N_A,
            USE_ASM,
            PDL,
            Q5,
            False,
            sums_ptr,
            num_sums,
            eps,
            SUMS=SUMS,
            SUMS_PAD=SUMS_PAD,
        )
    else:
        q6k_int16x_program(
            pid - programs_a,
            x_ptr,
            wb_ptr,
            bias_ptr + rows_a,
            out_ptr + rows_a,
            rows_b,
            num_blocks,
            stride_wb,
            NB_B,
            BLOCK_N_B,
            HAS_LINEAR_BIAS,
            USE_ASM,
            PDL,
            SPLIT_B,
            sums_ptr,
            num_sums,
            eps,
            SUMS=SUMS,
            SUMS_PAD=SUMS_PAD,
        )


def mixed_gemv_config(x: torch.Tensor, parts: list[QuantizedWeight]) -> tuple[int, int, int] | None:
    """Part A's (CHUNK, BLOCK_N, warps) where `mixed_gemv(x, parts, ...)` applies, else None: one
    token, two parts whose own one-token paths are the int16-x kernels of Q4_K / Q5_K then Q6_K
    (`gguf_gemv.int16x_one_token_config`), and KVSPILL_MIXED_GEMV not 0."""
    if len(parts) != 2 or x.shape[0] != 1 or x.stride(-1) != 1:
        return None
    a, b = parts
    if a.qtype not in ("Q4_K", "Q5_K") or b.qtype != "Q6_K":
        return None
    config_a = int16x_one_token_config(x, a)
    if config_a is None or int16x_one_token_config(x, b) is None or not switch_on("MIXED_GEMV"):
        return None
    return config_a


def mixed_gemv(
    x: torch.Tensor,  # [1, K]
    parts: list[QuantizedWeight],  # [part A (Q4_K / Q5_K), part B (Q6_K)], `mixed_gemv_config`
    bias: torch.Tensor | None,  # [rows_a + rows_b]
    out: torch.Tensor,  # [1, rows_a + rows_b], contiguous
    config_a: tuple[int, int, int] | None = None,  # `mixed_gemv_config(x, parts)` (found if None)
    fusion: GemvFusion | None = None,  # sums only: x is a handed-off norm's (norm_handoff.NormHandoff)
) -> torch.Tensor:
    """x @ [A; B].T (+ bias) into out in one launch (module docstring)."""
    a, b = parts
    rows_a, rows_b = a.out_features, b.out_features
    assert out.shape == (1, rows_a + rows_b) and out.is_contiguous() and out.dtype == x.dtype
    assert bias is None or (bias.shape == (rows_a + rows_b,) and bias.is_contiguous())
    config_a = config_a or int16x_one_token_config(x, a)
    assert config_a is not None, "mixed_gemv needs part A on the int16-x lanes (mixed_gemv_config)"
    chunk_a, block_n_a, num_warps = config_a
    chunk_b, block_n_b = MIXED_Q6K_CONFIGS[num_warps]
    programs_a = triton.cdiv(rows_a, block_n_a)
    grid = (programs_a + triton.cdiv(rows_b, block_n_b),)
    q4k_q6k_int16x_kernel[grid](
        x,
        a.data,
        b.data,
        bias if bias is not None else x,
        out,
        rows_a,
        rows_b,
        programs_a,
        a.in_features // 256,
        a.data.stride(0),
        b.data.stride(0),
        HAS_LINEAR_BIAS=bias is not None,
        SB_A=max(1, chunk_a // 256),
        BLOCK_N_A=block_n_a,
        NB_B=max(1, chunk_b // 256),
        BLOCK_N_B=block_n_b,
        USE_ASM=x.device.type != "cpu",
        Q5=a.qtype == "Q5_K",
        SPLIT_B=b.split,
        num_warps=num_warps,
        **pdl_meta(x.device),
        **int16x_fusion_meta(fusion, out),
    )
    return out
