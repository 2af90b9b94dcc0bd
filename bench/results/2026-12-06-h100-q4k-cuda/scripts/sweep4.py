"""Call 6: design b (the GGUF rows as they are) against design c (the same kernel on weights
repacked a 16-row tile and super-block at a time, `q4k_mma_cuda.repack_tiled`: each 16-byte load
of a warp one 512-byte run) at 1, 8 and 32 tokens, beside today's kernels (the int16-x GEMV at
one token, the Triton words form at more); checked, then timed as sweep.py."""

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

C = qc.CudaConfig
CONFIGS = [C(1, 8, 2, design="b"), C(1, 4, 2, design="b"), C(1, 8, 2, design="c"), C(1, 4, 2, design="c"),
           C(1, 8, 3, design="c"), C(1, 2, 2, design="c")]
if "interleave" in sys.argv[1:]:  # call 8: design d (the GGUF super-blocks of a tile side by side)
    CONFIGS = [C(1, 8, 2, design="c"), C(1, 4, 2, design="c"), C(1, 8, 2, design="d"), C(1, 4, 2, design="d"),
               C(1, 2, 2, design="d"), C(1, 8, 2, design="d", ahead=2)]
if "ahead" in sys.argv[1:]:  # call 7: two super-blocks of weights in flight, designs b and c
    CONFIGS = [C(1, 8, 2, design="c"), C(1, 4, 2, design="c"), C(1, 8, 2, design="c", ahead=2),
               C(1, 4, 2, design="c", ahead=2), C(1, 2, 2, design="c", ahead=2), C(1, 4, 2, design="b", ahead=2)]
for shape in ("gate_up", "down", "qkv", "o"):
    w = with_pairs(random_weight_cuda("Q4_K", *SHAPES[shape]))
    ws = copies(w)
    tiled = [qc.repack_tiled(c) for c in ws]
    inter = [qc.interleave_rows(c) for c in ws] if "interleave" in sys.argv[1:] else []
    dense = dequantize(w, torch.float32)
    for tokens in (1, 8, 32):
        x = torch.randn((tokens, w.in_features), dtype=torch.bfloat16, device="cuda")
        ref = x.float() @ dense.t()
        scale = float(ref.abs().max())
        cfg = mma_config(w, tokens)
        if tokens == 1:
            today = time_rotating_us(lambda x, w: quant_linear(x, w), ws, x, rep=20)
        else:
            today = time_rotating_us(lambda x, w, c=cfg: quant_matmul_mma(x, w, config=c), ws, x, rep=20)
        row = dict(shape=shape, tokens=tokens, today_us=round(today, 2))
        best = (1e9, "")
        for c0 in CONFIGS:
            wl = {"c": tiled, "d": inter}.get(c0.design, ws)
            for split in (1, 2, 4, 8):
                c = replace(c0, split_k=split)
                name = f"w{c.warps}s{c.stages}{c.design}a{c.ahead}k{split}"
                try:
                    err = float((qc.q4k_matmul_cuda(x, wl[0], config=c).float() - ref).abs().max()) / scale
                    us = time_rotating_us(lambda x, w, c=c: qc.q4k_matmul_cuda(x, w, config=c), wl, x, rep=20)
                    row[name] = round(us, 2) if err < 2e-2 else f"wrong {err:.3g}"
                    if err < 2e-2:
                        best = min(best, (us, name))
                except Exception as e:  # noqa: BLE001
                    row[name] = f"error: {str(e)[:200]}"
        row["best"] = [round(best[0], 2), best[1]]
        print(json.dumps(row), flush=True)
    del ws, tiled, inter, dense
    torch.cuda.empty_cache()
