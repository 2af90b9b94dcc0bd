"""How much of the 8-token Q4_K tensor-core kernel's time is its dequantization arithmetic.

Runs the words form (kernels/gguf_mma_words.py) on the Llama-3.1-8B Q4_K shapes at 8 bf16 tokens
with the dequantization asm cut down (VARIANT, patched into the module before the first compile;
the cut variants compute wrong numbers: timing only):
  full   - the kernel as it is: per pair of weights prmt|shr, lop3, fma (-128), fma (scale, min)
  nosub  - without the fma that takes the magic 128 out (3 instructions a pair)
  nofma  - without both fmas: the magic-number bf16 of q goes to the dot (2 a pair)
  raw    - the prmt / shifted bytes go to the dot as they are (1 a pair)
Then what else the loop does, with the asm as it is:
  hdr    - the 16-byte header (d, dmin, scales) read as 4 int32 words a row, the 8 (sc, m) cut from
           them, instead of three [rows, 8] byte tensors (right numbers)
  noscale - no scale / min loads at all (d*sc = 1, dmin*m = 0)
  xonce  - every super-block dotted with super-block 0's x (its x tiles come from L1)
  regN   - the kernel as it is, compiled with at most N registers a thread (more programs an SM)
  prepacked - with prepacked_scales.diff applied: the scale pairs from pack_scales (right numbers)
Prints one JSON line: us per call per shape (graph replays over weight copies past L2, PDL as in
the engine) and the GB/s of the weight bytes.
"""

import json
import os
import sys

import torch

import kvspill.kernels.gguf_mma_words as words
from kvspill.kernels.triton_compat import tl, triton

VARIANT = sys.argv[1]
PAIRS = {
    "nosub": """prmt.b32 p, $8, $9, SEL;
lop3.b32 q, p, 0x000F000F, MAGIC, 0xEA;
fma.rn.TYPE $LO, q, $10, $11;
shr.u32 p, p, 4;
lop3.b32 q, p, 0x000F000F, MAGIC, 0xEA;
fma.rn.TYPE $HI, q, $12, $13;""",
    "nofma": """prmt.b32 p, $8, $9, SEL;
lop3.b32 $LO, p, 0x000F000F, MAGIC, 0xEA;
shr.u32 p, p, 4;
lop3.b32 $HI, p, 0x000F000F, MAGIC, 0xEA;""",
    "raw": """prmt.b32 $LO, $8, $9, SEL;
shr.u32 $HI, $LO, 4;""",
}
if VARIANT in PAIRS:
    words._Q4_WORDS_PAIR = PAIRS[VARIANT]
    words._Q4_WORDS_BF16 = tl.constexpr(words._q4_words_asm("bf16x2", "0x43004300", "0x3F803F80", "0xC300C300"))



@triton.jit
def _scales_from_header(base, n_ok):
    N: tl.constexpr = base.shape[0]
    header = tl.load(
        base.to(tl.pointer_type(tl.int32))[:, None] + tl.arange(0, 4)[None, :], mask=n_ok[:, None], other=0
    )
    even, odd = tl.split(tl.reshape(header, (N, 2, 2)))
    w0, w2 = tl.split(even)
    w1, w3 = tl.split(odd)
    d = (w0 & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
    dmin = ((w0 >> 16) & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
    s = tl.arange(0, 8)[None, :]
    first = s < 4
    shift = 8 * (s % 4)
    w1, w2, w3 = w1[:, None], w2[:, None], w3[:, None]
    b_s = (tl.where(first, w1, w2) >> shift) & 0xFF
    b_s4 = (tl.where(first, w2, w3) >> shift) & 0xFF
    b_lo = (w1 >> shift) & 0xFF
    sc = tl.where(first, b_s & 63, (b_s4 & 0xF) | ((b_lo >> 6) << 4))
    m = tl.where(first, b_s4 & 63, (b_s4 >> 4) | ((b_s >> 6) << 4))
    return d[:, None] * sc.to(tl.float32), dmin[:, None] * m.to(tl.float32)


@triton.jit
def _no_scales(base, n_ok):
    ones = tl.full((base.shape[0], 8), 1.0, tl.float32)
    return ones, ones * 0.0


@triton.jit
def _dot_plane_x_once(acc, w, xt_ptr, plane, K: tl.constexpr, t, T_PAD: tl.constexpr, DOT_DTYPE: tl.constexpr):
    r = tl.arange(0, K)
    x = tl.load(xt_ptr + ((plane % 16) * K + r)[:, None] * T_PAD + t[None, :])
    w2 = tl.reshape(w, (w.shape[0], K)).to(DOT_DTYPE)
    return tl.dot(w2, x.to(DOT_DTYPE), acc, input_precision="ieee")


if VARIANT == "hdr":
    words.q4k_scales_mins = _scales_from_header
elif VARIANT == "noscale":
    words.q4k_scales_mins = _no_scales
elif VARIANT == "xonce":
    words._dot_plane = _dot_plane_x_once

from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us  # noqa: E402
from kvspill.kernels import gguf_mma  # noqa: E402
from kvspill.kernels.gguf_mma import quant_matmul_mma  # noqa: E402


class _WithMaxReg:
    """A kernel whose launches pass Triton's `maxnreg` option."""

    def __init__(self, kernel, regs):
        self.kernel, self.regs = kernel, regs

    def __getitem__(self, grid):
        launch = self.kernel[grid]
        return lambda *args, **kwargs: launch(*args, maxnreg=self.regs, **kwargs)


if VARIANT.startswith("reg"):
    gguf_mma._KERNELS["Q4_K"] = (_WithMaxReg(gguf_mma._q4k_mma_kernel, int(VARIANT[3:])), 32)

if __name__ == "__main__":

    SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
    result = {"variant": VARIANT}
    outputs = {}
    for name, (rows, cols) in SHAPES.items():
        weight = random_weight_cuda("Q4_K", rows, cols)
        x = torch.randn(8, cols, dtype=torch.bfloat16, device="cuda")
        if os.environ.get("SAVE"):  # the outputs of one call per shape, to compare trees bit by bit
            torch.manual_seed(1)
            x = torch.randn(8, cols, dtype=torch.bfloat16, device="cuda")
            outputs[name] = quant_matmul_mma(x, weight).cpu()
        matmul = quant_matmul_mma
        if VARIANT == "prepacked":
            from kvspill.kernels.gguf_mma_words import pack_scales

            packed = {}  # each weight copy's pairs, made outside the timed graph

            def matmul(x, w, _packed=packed):
                if w.data.data_ptr() not in _packed:
                    _packed[w.data.data_ptr()] = pack_scales(w.data, w.in_features, x.dtype)
                return quant_matmul_mma(x, w, scales=_packed[w.data.data_ptr()])

            copies = _copies(weight)
            for w in copies:
                matmul(x, w)
            if os.environ.get("SAVE"):
                outputs[name] = matmul(x, weight).cpu()
        us = time_rotating_us(matmul, _copies(weight) if VARIANT != "prepacked" else copies, x)
        result[name] = {"us": round(us, 2), "gbs": round(weight.data.numel() / us / 1e3, 1)}
    result["sum_us"] = round(sum(v["us"] for k, v in result.items() if isinstance(v, dict)), 2)
    print(json.dumps(result), flush=True)
    if os.environ.get("SAVE"):
        torch.save(outputs, os.environ["SAVE"])
