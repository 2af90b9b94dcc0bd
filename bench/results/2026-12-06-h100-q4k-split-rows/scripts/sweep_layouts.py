"""Today's Q4_K kernels (the int16-x GEMV at one token, the words form at 8-32 with the table's
config) on gguf's rows (argv[1] "gguf", this tree), on split rows ("split", PYTHONPATH at
q4k_split_patch.py's copy) or on design d's 16-row tiles ("interleave", at
../../2026-12-06-h100-q4k-cuda/scripts/interleave_patch.py's copy): checked against x @
dequantize(W).T of the gguf rows, timed over rotating copies (256 MB)."""

import json
import os
import sys
from dataclasses import replace

import torch

sys.path.insert(0, "bench/results/2026-12-06-h100-q4k-cuda/scripts")
from kvspill.bench.kernels_gguf import SHAPES, _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import mma_config
from kvspill.kernels.gguf_mma_words import pack_scales
from kvspill.kernels.quant_linear import quant_linear

LAYOUT = sys.argv[1] if len(sys.argv) > 1 else "gguf"
TOKENS = [int(v) for v in os.environ.get("TOKENS", "1,8,16,32").split(",")]  # call 10: TOKENS=1


def split_q4k(w, group=0):
    """Each row's 128-byte quants of every super-block, then the 16-byte headers; with a group, per
    `group` super-blocks (q4k_split_patch.py G)."""
    rows = w.out_features
    blocks = w.data.view(rows, -1, 144)
    g = group or blocks.shape[1]
    blocks = blocks.view(rows, -1, g, 144)
    data = torch.cat([blocks[..., 16:].reshape(rows, -1, g * 128), blocks[..., :16].reshape(rows, -1, g * 16)], 2)
    return replace(w, data=data.reshape(rows, -1).contiguous())


def laid_out(w):
    if LAYOUT.startswith("split"):  # split, split8; a "+load16" suffix names the kernel copy only
        return split_q4k(w, int(LAYOUT.split("+")[0][5:] or 0))
    if LAYOUT == "interleave":
        from sweep5 import interleaved
        return interleaved(w)
    return w


def main() -> None:
    for shape in ("qkv", "o", "gate_up", "down"):
        w = random_weight_cuda("Q4_K", *SHAPES[shape])
        w = replace(w, scale_pairs=pack_scales(w, torch.bfloat16))
        ws = [laid_out(c) for c in _copies(w)]
        dense = dequantize(w, torch.float32)
        for tokens in TOKENS:
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
