"""Today's tensor-core kernels (the table's config at 8 / 16 / 32 tokens) on the 8B Q4_K_M shapes,
run from this tree (argv[1] "strided") or from ranges_patch.py's copy (argv[1] "ranges",
PYTHONPATH at the copy): checked against x @ dequantize(W).T, timed over rotating copies."""

import json
import sys

import torch

from kvspill.bench.kernels_gguf import SHAPES, _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import mma_config
from kvspill.kernels.gguf_mma_words import pack_scales
from dataclasses import replace

LAYOUT = sys.argv[1]
SHAPES = {**SHAPES, "v": (1024, 4096)}
CASES = [("Q4_K", s) for s in ("qkv", "o", "gate_up", "down")] + [("Q6_K", s) for s in ("down", "v")]
for qtype, shape in CASES:
    if shape not in SHAPES:
        continue
    w = random_weight_cuda(qtype, *SHAPES[shape])
    if qtype == "Q4_K":
        w = replace(w, scale_pairs=pack_scales(w, torch.bfloat16))
    ws = _copies(w)
    dense = dequantize(w, torch.float32)
    for tokens in (8, 16, 32):
        x = torch.randn((tokens, w.in_features), dtype=torch.bfloat16, device="cuda")
        ref = x.float() @ dense.t()
        cfg = mma_config(w, tokens)
        fn = lambda x, w, c=cfg: quant_matmul_mma(x, w, config=c)  # noqa: E731
        err = float((fn(x, ws[0]).float() - ref).abs().max()) / float(ref.abs().max())
        us = time_rotating_us(fn, ws, x, rep=20)
        print(json.dumps(dict(layout=LAYOUT, qtype=qtype, shape=shape, tokens=tokens, split=cfg.split_k if cfg else None,
                              us=round(us, 2), err=round(err, 5))), flush=True)
    del ws, dense
    torch.cuda.empty_cache()
