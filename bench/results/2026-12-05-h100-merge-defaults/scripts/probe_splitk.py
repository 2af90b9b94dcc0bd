"""Would split-K pay for the one-token GEMV of the 8B down (4096 x 14336)? The same bytes as
4096 x 14336 laid out as 8192 x 7168 (twice the programs, half the K steps each) and one half
(4096 x 7168), Q4_K and Q6_K (gguf's layout), one bf16 token, weights streamed past L2. JSON lines."""

import json

import torch

from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels.gguf_gemv import quant_matmul_gemv

for qtype in ("Q4_K", "Q6_K"):
    for n, k in ((4096, 14336), (8192, 7168), (4096, 7168), (28672, 4096)):
        w = random_weight_cuda(qtype, n, k)
        x = torch.randn((1, k), dtype=torch.bfloat16, device="cuda")
        ws = _copies(w)
        us = time_rotating_us(quant_matmul_gemv, ws, x)
        print(
            json.dumps(dict(type=qtype, rows=n, k=k, us=round(us, 2), gbs=round(w.nbytes / us / 1e3))),
            flush=True,
        )
        del ws, w
