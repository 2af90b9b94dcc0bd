"""Call 3: the CUDA Q4_K kernel's configs (x staged or read from global memory, warps, rows, stages)
and every split K at 8 and 32 tokens on Llama-3.1-8B's Q4_K shapes, beside the Triton words form
(as sweep.py: checked, then medians of CUDA-graph replays over rotating copies)."""

import json
import sys
from dataclasses import replace

import torch

sys.path.insert(0, "bench/results/2026-12-06-h100-q4k-cuda/scripts")
from kvspill.bench.kernels_gguf import SHAPES, random_weight_cuda, time_rotating_us
from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import mma_config

import q4k_mma_cuda as qc
from sweep_common import copies, with_pairs

C = qc.CudaConfig
CONFIGS = [C(1, 8, 3), C(1, 8, 3, x_global=True), C(1, 4, 4, x_global=True), C(2, 4, 4, x_global=True),
           C(1, 2, 4, x_global=True), C(1, 2, 4), C(1, 8, 2), C(1, 4, 3, x_global=True), C(2, 8, 3, x_global=True)]
for shape in ("qkv", "o", "gate_up", "down"):
    w = with_pairs(random_weight_cuda("Q4_K", *SHAPES[shape]))
    ws = copies(w)
    dense = dequantize(w, torch.float32)
    for tokens in (8, 32):
        x = torch.randn((tokens, w.in_features), dtype=torch.bfloat16, device="cuda")
        ref = x.float() @ dense.t()
        scale = float(ref.abs().max())
        cfg = mma_config(w, tokens)
        row = dict(shape=shape, tokens=tokens,
                   triton_us=round(time_rotating_us(lambda x, w, c=cfg: quant_matmul_mma(x, w, config=c), ws, x, rep=20), 2))
        best = (1e9, "")
        for c0 in CONFIGS:
            for split in (1, 2, 4, 8):
                c = replace(c0, split_k=split)
                name = f"m{c.m_tiles}w{c.warps}s{c.stages}{'g' if c.x_global else ''}k{split}"
                try:
                    err = float((qc.q4k_matmul_cuda(x, w, config=c).float() - ref).abs().max()) / scale
                    us = time_rotating_us(lambda x, w, c=c: qc.q4k_matmul_cuda(x, w, config=c), ws, x, rep=20)
                    row[name] = round(us, 2) if err < 2e-2 else f"wrong {err:.3g}"
                    best = min(best, (us, name))
                except Exception as e:  # noqa: BLE001
                    row[name] = f"error: {str(e)[:200]}"
        row["best"] = [round(best[0], 2), best[1]]
        print(json.dumps(row), flush=True)
    del ws, dense
    torch.cuda.empty_cache()
