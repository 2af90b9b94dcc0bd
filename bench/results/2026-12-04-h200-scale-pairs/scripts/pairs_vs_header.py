"""The pairs' outputs against the header path's and against fp64, on the Llama-3.1-8B Q4_K shapes
at 2 / 8 / 32 tokens in bf16 and fp16 (the configs the engine runs): how many outputs differ, by
how many ulps at most, and each path's largest error over the largest output of the fp64 product
of the dequantized weights. Prints one JSON line per (shape, tokens, dtype)."""

import json

import torch

from kvspill.bench.kernels_gguf import random_weight_cuda
from kvspill.kernels.gguf_formats import QuantizedWeight, dequantize_ref
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import mma_config
from kvspill.kernels.gguf_mma_words import pack_scales


def _ordered(t: torch.Tensor) -> torch.Tensor:
    """A half tensor's bit patterns as integers in the order of their values (ulps apart = distance)."""
    bits = t.view(torch.int16).int()
    return torch.where(bits < 0, -(bits & 0x7FFF), bits)


SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
for name, (rows, cols) in SHAPES.items():
    weight = random_weight_cuda("Q4_K", rows, cols)
    exact = dequantize_ref(weight.data.cpu(), "Q4_K", cols).double()
    for tokens in (2, 8, 32):
        for dtype in (torch.bfloat16, torch.float16):
            torch.manual_seed(tokens)
            x = torch.randn(tokens, cols, device="cuda").to(dtype)
            paired = QuantizedWeight(weight.data, "Q4_K", rows, cols, pack_scales(weight, dtype))
            header, out = quant_matmul_mma(x, weight), quant_matmul_mma(x, paired)
            ref = x.cpu().double() @ exact.T
            scale = float(ref.abs().max())
            ulps = (_ordered(header) - _ordered(out)).abs()
            print(
                json.dumps(
                    {
                        "shape": name,
                        "tokens": tokens,
                        "dtype": str(dtype).removeprefix("torch."),
                        "config": str(mma_config(weight, tokens)),
                        "differ": int((header != out).sum()),
                        "of": header.numel(),
                        "max_ulps": int(ulps.max()),
                        "err_header": round(float((header.cpu().double() - ref).abs().max()) / scale, 6),
                        "err_pairs": round(float((out.cpu().double() - ref).abs().max()) / scale, 6),
                        "pairs_again_equal": bool(torch.equal(out, quant_matmul_mma(x, paired))),
                        "header_again_equal": bool(torch.equal(header, quant_matmul_mma(x, weight))),
                    }
                ),
                flush=True,
            )
