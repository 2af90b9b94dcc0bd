"""Whether Q6_K's kernels gain from the split layout (kernels/gguf_formats.split_q6k_rows: each
row's 192-byte quant parts, then its 18-byte scale parts; the same bytes, the quants 16-byte
aligned): each Llama-3.1-8B Q6_K shape (v 1024 x 4096, down 4096 x 14336, lm_head 128256 x 4096)
timed in gguf's layout and split, us per call from graph replays over weight copies past L2: the
8-token tensor-core kernel (`quant_matmul_mma`) and the one-token int16-x GEMV
(`quant_matmul_gemv`), bf16, with a digest of each output (the two layouts should give the same
bits). Compiled for sm_90 on the dev host (Triton 3.9), the tensor-core loop is 700 -> 572 SASS
instructions a super-block, 80 -> 69 registers, its 57 two-byte loads and 48 shared-memory
stores becoming 22 pipelined 16-byte copies (9 loads left, the scales); the GEMV's loop 253 ->
231, 56 -> 40 registers, 32 -> 20 loads (4-byte ones, no alignment test). Prints one JSON line
labelled by argv[1]."""

import hashlib
import json
import sys

import torch

from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels.gguf_formats import QuantizedWeight, split_q6k_rows
from kvspill.kernels.gguf_gemv import quant_matmul_gemv
from kvspill.kernels.gguf_mma import quant_matmul_mma

SHAPES = {"v": (1024, 4096), "down": (4096, 14336), "lm_head": (128256, 4096)}


def _digest(out: torch.Tensor) -> str:
    return hashlib.sha256(out.view(torch.int16).cpu().numpy().tobytes()).hexdigest()[:12]


def _time(result: dict, name: str, weights: list[QuantizedWeight], x: torch.Tensor) -> None:
    result[name] = round(time_rotating_us(quant_matmul_mma, weights, x), 2)
    result[f"{name} digest"] = _digest(quant_matmul_mma(x, weights[0]))
    result[f"{name} 1 token"] = round(time_rotating_us(quant_matmul_gemv, weights, x[:1]), 2)
    result[f"{name} 1 token digest"] = _digest(quant_matmul_gemv(x[:1], weights[0]))


torch.manual_seed(0)
result: dict = {"label": sys.argv[1]}
for name, (rows, cols) in SHAPES.items():
    copies = _copies(random_weight_cuda("Q6_K", rows, cols))
    x = torch.randn(8, cols, device="cuda").bfloat16()
    _time(result, name, copies, x)
    split = [QuantizedWeight(split_q6k_rows(w.data), "Q6_K", rows, cols, split=True) for w in copies]
    del copies
    _time(result, f"{name} split", split, x)
    del split
    torch.cuda.empty_cache()
print(json.dumps(result), flush=True)
