"""Q5_K at 8 tokens: the tensor-core kernel's sub-block form (magic quants; the Q4_K v2 picks:
32 rows, 2 warps, split K 4 up to 8,192 rows, 3 stages) against today's path (the dot kernel),
8B shapes, weights streamed past L2; each output against the dequantized reference. JSON lines."""
import json
import sys

import torch

from kvspill.bench.kernels_gguf import SHAPES, _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels.gguf_formats import dequantize_ref
from kvspill.kernels.gguf_gemv import quant_matmul_gemv
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import MmaConfig, for_shape

CFG = MmaConfig(block_n=32, num_warps=2, split_k=4, num_stages=3, magic=True)
tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 8
for name in ("gate_up", "down", "qkv", "o"):
    n, k = SHAPES[name]
    w = random_weight_cuda("Q5_K", n, k)
    x = torch.randn((tokens, k), dtype=torch.bfloat16, device="cuda")
    cfg = for_shape(CFG, n, k)  # split 1 past SPLIT_K_MAX_ROWS rows
    ref = x.float() @ dequantize_ref(w.data[:64].cpu(), "Q5_K", k).cuda().float().T
    got = quant_matmul_mma(x, w, config=cfg)[:, :64].float()
    err = float((got - ref).abs().max() / ref.abs().max())
    ws = _copies(w)
    mma_us = time_rotating_us(lambda xx, ww: quant_matmul_mma(xx, ww, config=cfg), ws, x)
    dot_us = time_rotating_us(quant_matmul_gemv, ws, x)
    print(json.dumps(dict(shape=name, tokens=tokens, mma_us=round(mma_us, 2), dot_us=round(dot_us, 2),
                          speedup=round(dot_us / mma_us, 2), gbs=round(w.nbytes / mma_us / 1e3), rel_err=err)), flush=True)
    del ws, w
    torch.cuda.empty_cache()
