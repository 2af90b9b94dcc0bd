"""The words form as the engine dispatches it (quant_linear, the table's configs) on the 8B
shapes at 4-32 tokens: Q4_K with its scale pairs, Q6_K in the split layout. argv[1] names the
tree (PYTHONPATH picks it). Checked against x @ dequantize(W).T, timed over rotating copies."""

import json
import os
import sys
from dataclasses import replace

import torch

from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.gguf_formats import split_q6k_rows
from kvspill.kernels.gguf_mma_words import pack_scales
from kvspill.kernels.quant_linear import quant_linear, quant_linear_path

TREE = sys.argv[1]
TOKENS = [int(v) for v in os.environ.get("TOKENS", "4,8,16,32").split(",")]
TYPES = os.environ.get("TYPES", "Q4_K,Q6_K").split(",")
CASES = [("Q4_K", "qkv", 6144, 4096), ("Q4_K", "o", 4096, 4096), ("Q4_K", "gate_up", 28672, 4096),
         ("Q4_K", "down", 4096, 14336), ("Q6_K", "v", 1024, 4096), ("Q6_K", "down", 4096, 14336),
         ("Q6_K", "lm_head", 128256, 4096)]


def main() -> None:
    for qtype, shape, rows, cols in [c for c in CASES if c[0] in TYPES]:
        w = random_weight_cuda(qtype, rows, cols)
        dense = dequantize(w, torch.float32)
        if qtype == "Q4_K":
            w = replace(w, scale_pairs=pack_scales(w, torch.bfloat16))
        else:
            w = replace(w, data=split_q6k_rows(w.data), split=True)
        ws = _copies(w)
        for tokens in TOKENS:
            x = torch.randn((tokens, cols), dtype=torch.bfloat16, device="cuda")
            ref = x.float() @ dense.t()
            fn = lambda x, w: quant_linear(x, w)  # noqa: E731
            err = float((fn(x, ws[0]).float() - ref).abs().max()) / float(ref.abs().max())
            us = time_rotating_us(fn, ws, x, rep=20)
            rec = dict(tree=TREE, type=qtype, shape=shape, tokens=tokens, path=quant_linear_path(x, w),
                       us=round(us, 2), err=round(err, 5))
            print(json.dumps(rec), flush=True)
        del ws, dense
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
