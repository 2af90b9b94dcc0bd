"""The tensor-core words form at 8 bf16 tokens on the Llama-3.1-8B Q4_K and Q6_K shapes, us per
call from graph replays over weight copies past L2, for the tree as it is (call B runs it on the
landed kernels and with `words_since_0d44b15.diff` reversed: masked loads, the int32 pairs asm):
Q4_K with the scale pairs and with the header's scales, Q6_K from the header. With each time, a
digest of the output's bytes (the same weights and x every run: the change keeps every product and
sum, so the digests should match across labels). Prints one JSON line labelled by argv[1]."""

import hashlib
import json
import sys

import torch

from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels.gguf_formats import QuantizedWeight
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_words import pack_scales

SHAPES = {
    "Q4_K": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)},
    "Q6_K": {"v": (1024, 4096), "down": (4096, 14336), "lm_head": (128256, 4096)},
}


def _digest(out: torch.Tensor) -> str:
    return hashlib.sha256(out.view(torch.int16).cpu().numpy().tobytes()).hexdigest()[:12]


torch.manual_seed(0)
x_by_cols = {c: torch.randn(8, c, device="cuda").bfloat16() for c in (4096, 14336)}
result: dict = {"label": sys.argv[1]}
for qtype, shapes in SHAPES.items():
    for name, (rows, cols) in shapes.items():
        copies = _copies(random_weight_cuda(qtype, rows, cols))
        x = x_by_cols[cols]
        result[f"{qtype} {name}"] = round(time_rotating_us(quant_matmul_mma, copies, x), 2)
        result[f"{qtype} {name} digest"] = _digest(quant_matmul_mma(x, copies[0]))
        if qtype == "Q4_K":
            paired = [QuantizedWeight(w.data, qtype, rows, cols, pack_scales(w, x.dtype)) for w in copies]
            result[f"{qtype} {name} pairs"] = round(time_rotating_us(quant_matmul_mma, paired, x), 2)
            result[f"{qtype} {name} pairs digest"] = _digest(quant_matmul_mma(x, paired[0]))
        del copies
        torch.cuda.empty_cache()
print(json.dumps(result), flush=True)
