"""Call 9: today's Q4_K kernels (the int16-x GEMV at one token, the Triton words form at 8-32) on
gguf's rows (argv[1] "gguf", this tree) or on design d's interleaved layout (argv[1] "interleave",
run with PYTHONPATH at interleave_patch.py's copy): checked against x @ dequantize(W).T of the
gguf rows, timed as sweep.py."""

import json
import sys
from dataclasses import replace

import torch

sys.path.insert(0, "bench/results/2026-12-06-h100-q4k-cuda/scripts")
from kvspill.bench.kernels_gguf import SHAPES, random_weight_cuda, time_rotating_us
from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import mma_config
from kvspill.kernels.quant_linear import quant_linear

import q4k_mma_cuda as qc
from sweep_common import copies, with_pairs

LAYOUT = sys.argv[1] if len(sys.argv) > 1 else "gguf"


def interleaved(w):
    """The same QuantizedWeight shapes, design d's bytes (the patched kernels read them so)."""
    t = qc.interleave_rows(w)
    pairs = t.scale_pairs.contiguous().view(w.scale_pairs.dtype).view(w.scale_pairs.shape)
    return replace(w, data=t.data.contiguous().view(w.data.shape), scale_pairs=pairs)


def main() -> None:
    for shape in ("gate_up", "down", "qkv", "o"):
        w = with_pairs(random_weight_cuda("Q4_K", *SHAPES[shape]))
        ws = copies(w)
        dense = dequantize(w, torch.float32)
        if LAYOUT == "interleave":
            ws = [interleaved(c) for c in ws]
        for tokens in (1, 8, 16, 32):
            x = torch.randn((tokens, w.in_features), dtype=torch.bfloat16, device="cuda")
            ref = x.float() @ dense.t()
            if tokens == 1:
                fn = lambda x, w: quant_linear(x, w)  # noqa: E731
            else:
                cfg = mma_config(w, tokens)
                fn = lambda x, w, c=cfg: quant_matmul_mma(x, w, config=c)  # noqa: E731
            err = float((fn(x, ws[0]).float() - ref).abs().max()) / float(ref.abs().max())
            us = time_rotating_us(fn, ws, x, rep=20)
            print(json.dumps(dict(layout=LAYOUT, shape=shape, tokens=tokens, us=round(us, 2), err=round(err, 5))), flush=True)
        del ws, dense
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
