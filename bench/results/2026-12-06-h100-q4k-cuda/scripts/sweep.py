"""The CUDA Q4_K tensor-core kernel (scripts/q4k_mma_cuda.py, kernels/q4k_mma_cuda.py when it ran) against the Triton words form
on Llama-3.1-8B's Q4_K shapes: checked against x @ dequantize(W).T, then timed as kernels_gguf
times (medians of CUDA-graph replays over rotating weight copies, >= 256 MB a replay).
Run from the repository root on a GPU: python bench/results/2026-12-06-h100-q4k-cuda/scripts/sweep.py [quick]"""

import json
import sys
import time
from dataclasses import replace

import torch

sys.path.insert(0, "bench/results/2026-12-06-h100-q4k-cuda/scripts")
import q4k_mma_cuda as qc  # noqa: E402
from sweep_common import copies, with_pairs  # noqa: E402

from kvspill.bench.kernels_gguf import SHAPES, copy_ceiling_gbps, random_weight_cuda, time_rotating_us
from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import mma_config
from kvspill.kernels.quant_linear import quant_linear

QUICK = "quick" in sys.argv[1:]
print(json.dumps(dict(torch=torch.__version__, card=torch.cuda.get_device_name(), nvrtc=hasattr(torch.cuda, "_compile_kernel"),
                      date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))), flush=True)
print(json.dumps(dict(copy_ceiling_gbps=round(copy_ceiling_gbps()))), flush=True)
print("unavailable:", qc._unavailable(0), flush=True)


CONFIGS = [qc.CudaConfig(2, 4, 3), qc.CudaConfig(2, 4, 4), qc.CudaConfig(1, 4, 4), qc.CudaConfig(2, 8, 3),
           qc.CudaConfig(1, 8, 3), qc.CudaConfig(2, 2, 4)]
TOKENS_SWEPT = (8, 32) if QUICK else (8, 16, 32)
TOKENS_DEFAULT = (1, 2, 4, 64) if not QUICK else (1, 4)
for shape in ("qkv", "o", "gate_up", "down"):
    w = with_pairs(random_weight_cuda("Q4_K", *SHAPES[shape]))
    ws = copies(w)
    dense = dequantize(w, torch.float32)
    for tokens in sorted(TOKENS_SWEPT + TOKENS_DEFAULT):
        x = torch.randn((tokens, w.in_features), dtype=torch.bfloat16, device="cuda", generator=torch.Generator("cuda").manual_seed(tokens))
        ref = x.float() @ dense.t()
        scale = float(ref.abs().max())
        row = dict(shape=shape, tokens=tokens)
        if tokens >= 2 and mma_config(w, tokens) is not None:
            cfg = mma_config(w, tokens)
            tri = quant_matmul_mma(x, w, config=cfg).float()
            row["triton_err"] = round(float((tri - ref).abs().max()) / scale, 5)
            row["triton_us"] = round(time_rotating_us(lambda x, w, c=cfg: quant_matmul_mma(x, w, config=c), ws, x, rep=20), 2)
        if tokens == 1:
            row["gemv_us"] = round(time_rotating_us(lambda x, w: quant_linear(x, w), ws, x, rep=20), 2)
        configs = CONFIGS if tokens in TOKENS_SWEPT else CONFIGS[:2]
        for cfg in configs:
            splits = [0] + ([1, 2, 4, 8] if cfg == CONFIGS[0] and tokens in TOKENS_SWEPT else [])
            for split in splits:
                c = replace(cfg, split_k=split)
                name = f"m{c.m_tiles}w{c.warps}s{c.stages}k{split or qc.split_for(c, w.out_features, w.in_features // 256, qc.t_pad(tokens), x.device)}{'' if split else 'auto'}"
                try:
                    got = qc.q4k_matmul_cuda(x, w, config=c).float()
                    err = float((got - ref).abs().max()) / scale
                    if tokens >= 2 and "triton_err" in row:
                        err_tri = float((got - tri).abs().max()) / scale
                    else:
                        err_tri = None
                    us = time_rotating_us(lambda x, w, c=c: qc.q4k_matmul_cuda(x, w, config=c), ws, x, rep=20)
                    row[name] = dict(us=round(us, 2), gbs=round(w.nbytes / us / 1e3), err=round(err, 5),
                                     vs_triton=None if err_tri is None else round(err_tri, 6))
                except Exception as e:  # noqa: BLE001
                    row[name] = f"error: {str(e)[:300]}"
        print(json.dumps(row), flush=True)
    del ws, dense
    torch.cuda.empty_cache()
