"""fp8 weights (vLLM's `--quantization fp8`): float8_e4m3fn with one float32 scale per output row.

Shapes: x [..., in_features] bf16 / fp16 / fp32; w_fp8 [out_features, in_features] float8_e4m3fn;
w_scale [out_features] float32; bias [out_features] in x's dtype or None -> [..., out_features].

A weight row w is stored as q = rne(w / s) with s = max(absmax(w), EPS) / 448, so dequantized
q * s is within 2^-4 relative of w (e4m3 keeps 3 mantissa bits) and a row's absmax maps to 448.
EPS keeps a zero row's scale positive: its q is all zero and nothing divides by zero.

Paths (`fp8_linear_path` says which one a call takes):
- "gemv" (CUDA, bf16 / fp16 x, 1-16 tokens: decode): kernels/fp8_gemv.py, weight-only (x is not
  quantized), each weight byte read once;
- "scaled_mm" (CUDA, compute capability 8.9+, in/out features multiples of 16, torch's
  requirement): x is quantized per token (row) to e4m3 with float32 scales by `quantize_rows_fp8`
  (one Triton kernel), then one `torch._scaled_mm`. bf16 takes the row-wise scaled GEMM with the
  scales and bias fused in its epilogue (that kernel only writes bf16 on sm89 and on older cuBLAS);
  fp16 / fp32 take a tensor-wise GEMM with unit scales into fp32, scaled after. Everything stays on
  the device: no host sync, so the path can be captured in a CUDA graph.
- "reference" (the CPU, anything else): `fp8_linear_ref`, weights dequantized to x's dtype and a
  dense matmul; x is NOT quantized, so CPU results differ from the GPU's by the activation
  rounding (a layer's output by about 2.6% RMS relative: K 4096, random data, CPU emulation).

Invariants: `quantize_rows_fp8` equals `quantize_rows_fp8_ref` bit for bit (IEEE division on both);
the "scaled_mm" path equals `fp8_scaled_mm_ref` of the quantized operands up to fp32 summation order
and the output rounding.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from kvspill.errors import InvalidParameterError
from kvspill.kernels.fp8_gemv import MAX_GEMV_TOKENS, fp8_gemv
from kvspill.kernels.triton_compat import HAS_TRITON, tl, triton

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn
EPS = 1e-12  # floor of a row's absmax: the scale of an all-zero row stays positive
MIN_CAPABILITY = (8, 9)  # fp8 tensor cores: Ada (8.9) and Hopper (9.0) on

Fp8LinearPath = Literal["gemv", "scaled_mm", "reference"]


def check_fp8_supported(device: torch.device) -> None:
    """Raise unless `device` can run fp8 weights: any CPU (reference path), CUDA sm89+."""
    if device.type != "cuda":
        return
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < MIN_CAPABILITY:
        raise InvalidParameterError(
            "quantization",
            f"fp8 weights need compute capability 8.9+ (Ada/Hopper); this GPU is {major}.{minor}: "
            "use --quantization none or a GGUF file",
        )


def quantize_weight_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out_features, in_features] float -> (w_fp8 [out, in] float8_e4m3fn, scale [out] float32).

    Math in float32 on w's device; used at load time for weights, and as the activations' reference."""
    assert w.dim() == 2 and w.is_floating_point(), (
        f"w must be a 2-D float tensor, got {w.dtype} {tuple(w.shape)}"
    )
    wf = w.float()
    scale = wf.abs().amax(dim=1).clamp(min=EPS) / FP8_MAX  # [out]
    q = (wf / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q, scale


def dequantize_fp8(w_fp8: torch.Tensor, w_scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[out, in] float8 x [out] float32 -> [out, in] in `dtype` (product in float32, then rounded)."""
    return (w_fp8.float() * w_scale[:, None]).to(dtype)


def fp8_linear_ref(
    x: torch.Tensor,  # [..., in_features]
    w_fp8: torch.Tensor,  # [out_features, in_features] float8_e4m3fn
    w_scale: torch.Tensor,  # [out_features] float32
    bias: torch.Tensor | None = None,  # [out_features]
) -> torch.Tensor:
    """Weight-only reference (the CPU path): F.linear(x, dequantized weight rounded to x's dtype)."""
    return F.linear(x, dequantize_fp8(w_fp8, w_scale, x.dtype), None if bias is None else bias.to(x.dtype))


def quantize_rows_fp8_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token activations: x [num_tokens, K] -> (x_fp8 [num_tokens, K], x_scale [num_tokens, 1] float32)."""
    q, scale = quantize_weight_fp8(x)
    return q, scale[:, None]


def fp8_scaled_mm_ref(
    x_fp8: torch.Tensor,  # [num_tokens, K] float8
    x_scale: torch.Tensor,  # [num_tokens, 1] float32
    w_fp8: torch.Tensor,  # [N, K] float8
    w_scale: torch.Tensor,  # [N] float32
    bias: torch.Tensor | None,  # [N]
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """What `torch._scaled_mm` computes: (x_fp8 @ w_fp8.T) * x_scale * w_scale (+ bias), fp32 inside."""
    out = (x_fp8.float() @ w_fp8.float().t()) * x_scale * w_scale[None, :]
    if bias is not None:
        out = out + bias.float()
    return out.to(out_dtype)


@triton.jit
def _round_to_e4m3(v):
    # Round fp32 to the nearest-even e4m3 value while still fp32. Only under Triton's interpreter,
    # whose fp32 -> fp8 cast drops the carry when rounding up overflows the mantissa (127.5 -> 64,
    # triton 3.9); the cast of an already representable value is exact there. GPUs cast natively.
    bits = v.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFFF + ((bits >> 20) & 1)) & 0xFFF00000  # keep 3 of 23 mantissa bits
    normal = rounded.to(tl.float32, bitcast=True)
    subnormal = (tl.abs(v) + 24576.0) - 24576.0  # 1.5 * 2^14: fp32 addition rounds to the 2^-9 grid
    subnormal = tl.where((bits >> 31) != 0, -subnormal, subnormal)  # the sign bit: -0.0 stays -0.0
    return tl.where(tl.abs(v) < 0.015625, subnormal, normal)  # 2^-6: smallest normal e4m3


@triton.jit
def _quantize_rows_kernel(
    x_ptr,
    q_ptr,
    scale_ptr,
    K,
    stride_x,
    stride_q,
    EPS_: tl.constexpr,
    FP8_MAX_: tl.constexpr,
    INTERPRETER: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # One program per token row, two passes over it: absmax, then scale and cast (the second read
    # mostly hits L2: a row is at most tens of KB).
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, K, BLOCK):
        ok = start + cols < K
        x = tl.load(x_ptr + row * stride_x + start + cols, mask=ok, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    # div_rn: IEEE division like torch's (Triton's `/` is div.full.f32 on NVIDIA, off by an ulp).
    scale = tl.math.div_rn(tl.maximum(tl.max(amax, 0), EPS_), FP8_MAX_)
    tl.store(scale_ptr + row, scale)
    for start in range(0, K, BLOCK):
        ok = start + cols < K
        x = tl.load(x_ptr + row * stride_x + start + cols, mask=ok, other=0.0).to(tl.float32)
        v = tl.clamp(tl.math.div_rn(x, scale), -FP8_MAX_, FP8_MAX_)
        if INTERPRETER:
            v = _round_to_e4m3(v)
        tl.store(q_ptr + row * stride_q + start + cols, v.to(q_ptr.dtype.element_ty), mask=ok)


def quantize_rows_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton wrapper; same contract as `quantize_rows_fp8_ref` (x rows may be strided)."""
    assert x.dim() == 2 and x.stride(1) == 1, (
        f"x must be [num_tokens, K] with rows contiguous, got {tuple(x.shape)}"
    )
    assert x.dtype in (torch.float32, torch.float16, torch.bfloat16), f"x dtype {x.dtype}"
    num_tokens, k = x.shape
    q = torch.empty((num_tokens, k), dtype=FP8_DTYPE, device=x.device)
    scale = torch.empty((num_tokens, 1), dtype=torch.float32, device=x.device)
    if num_tokens > 0:
        # 4096 covers a 4K-8K hidden size in one or two chunks; untuned.
        block = min(triton.next_power_of_2(k), 4096)
        _quantize_rows_kernel[(num_tokens,)](
            x,
            q,
            scale,
            k,
            x.stride(0),
            q.stride(0),
            EPS_=EPS,
            FP8_MAX_=FP8_MAX,
            INTERPRETER=x.device.type == "cpu",  # Triton on CPU tensors is the interpreter
            BLOCK=block,
            num_warps=min(8, max(1, block // 512)),
        )
    return q, scale


def fp8_linear_path(x: torch.Tensor, w_fp8: torch.Tensor) -> Fp8LinearPath:
    """The path `fp8_linear(x, ...)` takes."""
    out_features, in_features = w_fp8.shape
    if x.device.type != "cuda":
        return "reference"
    num_tokens = x.numel() // max(in_features, 1)
    if x.dtype in (torch.bfloat16, torch.float16) and 1 <= num_tokens <= MAX_GEMV_TOKENS:
        return "gemv"
    if in_features % 16 == 0 and out_features % 16 == 0:
        return "scaled_mm"
    return "reference"


def fp8_linear(
    x: torch.Tensor,  # [..., in_features]
    w_fp8: torch.Tensor,  # [out_features, in_features] float8_e4m3fn, rows contiguous
    w_scale: torch.Tensor,  # [out_features] float32, contiguous
    bias: torch.Tensor | None = None,  # [out_features] in x's dtype
    path: Fp8LinearPath | None = None,  # force a path: tests run "scaled_mm" / "gemv" on the CPU
) -> torch.Tensor:
    """x @ dequant(W).T (+ bias) -> [..., out_features] in x's dtype; see the module docstring."""
    out_features, in_features = w_fp8.shape
    assert x.shape[-1] == in_features, f"x has {x.shape[-1]} features, weight {in_features}"
    assert w_fp8.dtype == FP8_DTYPE and w_fp8.stride(1) == 1, f"w_fp8 must be row-major {FP8_DTYPE}"
    assert w_scale.shape == (out_features,) and w_scale.dtype == torch.float32 and w_scale.is_contiguous()
    assert bias is None or (bias.shape == (out_features,) and bias.dtype == x.dtype)
    path = path or fp8_linear_path(x, w_fp8)
    if path == "reference":
        return fp8_linear_ref(x, w_fp8, w_scale, bias)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, in_features)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    if path == "gemv":
        return fp8_gemv(x2, w_fp8, w_scale, bias).reshape(*lead, out_features)
    x_fp8, x_scale = quantize_rows_fp8(x2) if HAS_TRITON else quantize_rows_fp8_ref(x2)
    w_t = w_fp8.t()  # [K, N] column-major, as _scaled_mm wants its second operand
    if x.dtype == torch.bfloat16:
        # Row-wise scales: scale_a [M, 1], scale_b [1, N], both float32 and contiguous. M needs no
        # padding (torch checks only K and N % 16; its CUTLASS kernel pads the scales itself).
        out = torch._scaled_mm(
            x_fp8, w_t, scale_a=x_scale, scale_b=w_scale.view(1, -1), bias=bias, out_dtype=x.dtype
        )
    else:
        one = torch.ones((), dtype=torch.float32, device=x.device)
        acc = torch._scaled_mm(x_fp8, w_t, scale_a=one, scale_b=one, out_dtype=torch.float32)
        acc = acc * x_scale * w_scale[None, :]
        out = (acc if bias is None else acc + bias.float()).to(x.dtype)
    return out.reshape(*lead, out_features)
