"""Which per-token int8 scheme for K/V (evaluation only; run from the repo root with PYTHONPATH=$PWD):
teacher-forced SmolLM2 (fp32 compute) over two disjoint 2048-token windows of the stdlib text
`kvspill.bench.kv_quality` reads (window 0 is the gate's text), against fp32 K/V.

- sym: int8, absmax / 127 per token and kv head (the engine's row format, no basis change)
- asym: uint8-like range with an integer zero point per token and kv head ((max - min) / 255)
- hadamard: the engine's `--kv-cache-dtype int8` (sym rows of the Hadamard-basis K/V)
- bf16: K/V rounded to bf16 (the engine's default KV on CUDA): where the noise floor is
"""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F

from kvspill.bench import kv_quality as kq
from kvspill.kernels.kv_quant import dequantize_kv, quantize_kv
from kvspill.model.loader import load_model
from kvspill.model.resolve import resolve_model
from kvspill.tokenizer import load_tokenizer


def sym(x: torch.Tensor) -> torch.Tensor:
    return dequantize_kv(quantize_kv(x, torch.int8))


def asym(x: torch.Tensor) -> torch.Tensor:
    lo, hi = x.amin(-1, keepdim=True), x.amax(-1, keepdim=True)
    scale = (hi - lo) / 255.0
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero = torch.round(-lo / safe) - 128
    return ((torch.round(x / safe) + zero).clamp(-128, 127) - zero) * scale


SCHEMES = {
    "sym": sym,
    "asym": asym,
    "hadamard": lambda x: kq.stored_and_read(x, torch.int8),
    "bf16": lambda x: x.to(torch.bfloat16).float(),
}


class Converted:
    def __init__(self, convert) -> None:
        self.convert = convert

    def __call__(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.convert is not None:
            k, v = self.convert(k), self.convert(v)
        o = F.scaled_dot_product_attention(
            q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], is_causal=True, enable_gqa=True
        )
        return o[0].transpose(0, 1)


def main() -> None:
    resolved = resolve_model(None)
    loaded = load_model(resolved, torch.device("cpu"), torch.float32)
    ids = load_tokenizer(resolved).encode(kq.stdlib_text())
    for window in range(2):
        part = ids[window * 2048 : (window + 1) * 2048]
        ref = kq.teacher_forced(loaded.model, part, Converted(None))
        for name, convert in SCHEMES.items():
            result = kq.compare(ref, kq.teacher_forced(loaded.model, part, Converted(convert)))
            print(json.dumps({"window": window, "scheme": name, **result}), flush=True)


if __name__ == "__main__":
    main()
