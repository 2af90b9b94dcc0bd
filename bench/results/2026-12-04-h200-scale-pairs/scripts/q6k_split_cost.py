"""Whether Q6_K's kernels gain from 16-byte aligned quants (prepared, not run): with
`q6k_split.diff` applied, each Llama-3.1-8B Q6_K shape (v 1024 x 4096, down 4096 x 14336, lm_head
128256 x 4096) is timed in gguf's layout and in the split one (`split_q6k_rows`: each row's
192-byte quant parts, then its 18-byte scale parts; the same bytes), us per call from graph
replays over weight copies past L2: the 8-token tensor-core kernel (`quant_matmul_mma`) and the
one-token int16-x GEMV (`gguf_gemv._launch_q6k_int16x`), bf16, with a digest of each output (the
two layouts should give the same bits). Compiled for sm_90 on the dev host (Triton 3.9), the
tensor-core loop is 688 -> 572 SASS instructions a super-block, its two-byte loads and
shared-memory round trips (57 LDG, 48 STS, 18 LDS) becoming 22 pipelined 16-byte copies and 15
LDS; the GEMV's loop 301 -> 231, 38 -> 20 loads (4-byte ones, no alignment test). Without the
diff (HEAD) only gguf's layout is timed. Prints one JSON line labelled by argv[1]."""

import hashlib
import json
import sys

import torch

import kvspill.kernels.gguf_mma as mma
from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us
from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_formats import QuantizedWeight

SHAPES = {"v": (1024, 4096), "down": (4096, 14336), "lm_head": (128256, 4096)}
split_rows = getattr(mma, "split_q6k_rows", None)


def _digest(out: torch.Tensor) -> str:
    return hashlib.sha256(out.view(torch.int16).cpu().numpy().tobytes()).hexdigest()[:12]


def _split(x: torch.Tensor, w: QuantizedWeight) -> torch.Tensor:
    return mma.quant_matmul_mma(x, w, q6k_split=True)


def _gemv(x: torch.Tensor, w: QuantizedWeight, **split: bool) -> torch.Tensor:
    out = torch.empty((1, w.out_features), dtype=x.dtype, device=x.device)
    gguf_gemv._launch_q6k_int16x(x, w, None, out, **split)
    return out


def _gemv_split(x: torch.Tensor, w: QuantizedWeight) -> torch.Tensor:
    return _gemv(x, w, q6k_split=True)


torch.manual_seed(0)
result: dict = {"label": sys.argv[1]}
for name, (rows, cols) in SHAPES.items():
    copies = _copies(random_weight_cuda("Q6_K", rows, cols))
    x = torch.randn(8, cols, device="cuda").bfloat16()
    result[name] = round(time_rotating_us(mma.quant_matmul_mma, copies, x), 2)
    result[f"{name} digest"] = _digest(mma.quant_matmul_mma(x, copies[0]))
    result[f"{name} 1 token"] = round(time_rotating_us(_gemv, copies, x[:1]), 2)
    result[f"{name} 1 token digest"] = _digest(_gemv(x[:1], copies[0]))
    if split_rows is not None:
        split = [QuantizedWeight(split_rows(w.data), "Q6_K", rows, cols) for w in copies]
        del copies
        result[f"{name} split"] = round(time_rotating_us(_split, split, x), 2)
        result[f"{name} split digest"] = _digest(_split(x, split[0]))
        result[f"{name} 1 token split"] = round(time_rotating_us(_gemv_split, split, x[:1]), 2)
        result[f"{name} 1 token split digest"] = _digest(_gemv_split(x[:1], split[0]))
        del split
    torch.cuda.empty_cache()
print(json.dumps(result), flush=True)
