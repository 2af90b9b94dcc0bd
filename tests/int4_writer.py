"""Write AWQ / GPTQ int4 checkpoints of a dense safetensors model, for tests (model/int4_checkpoints.py
reads them). These packers are the tests' own, independent of the loader's unpackers: the dense
q/k/v/o/gate/up/down weights are quantized to asymmetric int4 groups (AWQ's min/max rule), packed,
and saved beside a config.json carrying `quantization_config`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import Tensor

from kvspill.model.int4_checkpoints import dequantize_int4
from kvspill.model.loader import _iter_safetensors

PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _int32(words: Tensor) -> Tensor:
    """int64 words in [0, 2**32) -> int32 with the same bits."""
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def _pack_cols(x: Tensor, order: tuple[int, ...]) -> Tensor:
    """[rows, cols] 4-bit values -> int32 [rows, cols / 8]: nibble k of word c = column 8c + order[k]."""
    x = x.to(torch.int64)
    words = torch.zeros(x.shape[0], x.shape[1] // 8, dtype=torch.int64)
    for k, col in enumerate(order):
        words |= x[:, col::8] << (4 * k)
    return _int32(words)


def pack_awq(q: Tensor, z: Tensor, s: Tensor) -> dict[str, Tensor]:
    order = (0, 2, 4, 6, 1, 3, 5, 7)
    return {
        "qweight": _pack_cols(q.t(), order),  # [in, out / 8]
        "qzeros": _pack_cols(z.t(), order),  # [G, out / 8]
        "scales": s.t().contiguous().half(),  # [G, out]
    }


def pack_gptq(q: Tensor, z: Tensor, s: Tensor, v2: bool) -> dict[str, Tensor]:
    qt = q.t().to(torch.int64)  # [in, out]
    words = torch.zeros(qt.shape[0] // 8, qt.shape[1], dtype=torch.int64)
    for k in range(8):
        words |= qt[k::8] << (4 * k)
    stored = z.t() if v2 else (z.t().to(torch.int64) - 1).clamp(min=0)
    group = q.shape[1] // z.shape[1]
    return {
        "qweight": _int32(words),  # [in / 8, out]
        "qzeros": _pack_cols(stored, tuple(range(8))),  # [G, out / 8]
        "scales": s.t().contiguous().half(),
        "g_idx": (torch.arange(q.shape[1]) // group).to(torch.int32),
    }


def quantize_int4(w: Tensor, group: int, min_zero: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """Asymmetric min/max int4 per group (AWQ's rule): w [out, in] -> q [out, in], z, s [out, G]."""
    out, inp = w.shape
    g = w.float().reshape(out, inp // group, group)
    lo, hi = g.amin(-1), g.amax(-1)
    s = ((hi - lo).clamp(min=1e-5) / 15).half()
    z = (-torch.round(lo / s.float())).clamp(min_zero, 15)
    q = (torch.round(g / s.float().unsqueeze(-1)) + z.unsqueeze(-1)).clamp(0, 15)
    return q.reshape(out, inp).to(torch.uint8), z.to(torch.uint8), s


def random_int4(out: int, inp: int, group: int, gen: torch.Generator, zmin: int = 0, zmax: int = 15):
    q = torch.randint(0, 16, (out, inp), generator=gen, dtype=torch.uint8)
    z = torch.randint(zmin, zmax + 1, (out, inp // group), generator=gen).to(torch.uint8)
    s = (torch.rand((out, inp // group), generator=gen) * 0.02 + 1e-3).half()
    return q, z, s


def write_int4_checkpoint(
    src: Path, dst: Path, method: str, fmt: str | None, group: int
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """An int4 copy of the tiny model at `dst`; returns by HF name the exact int4 weights (q - z) * s
    in float32, and the same computed in fp16 as AWQ's kernels do."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors*"))
    tensors: dict[str, Tensor] = {}
    exact: dict[str, Tensor] = {}
    fp16: dict[str, Tensor] = {}
    for name, tensor in _iter_safetensors(src):
        prefix, _, leaf = name.rpartition(".")
        if leaf != "weight" or prefix.rpartition(".")[2] not in PROJ:
            tensors[name] = tensor.contiguous()
            continue
        q, z, s = quantize_int4(tensor, group, min_zero=1 if fmt == "gptq" else 0)
        exact[name] = dequantize_int4(q, z, s)
        zz, ss = z.half().repeat_interleave(group, 1), s.repeat_interleave(group, 1)
        fp16[name] = ((q.half() - zz) * ss).float()
        packed = pack_awq(q, z, s) if method == "awq" else pack_gptq(q, z, s, v2=fmt == "gptq_v2")
        tensors.update({f"{prefix}.{k}": v for k, v in packed.items()})
    save_file(tensors, str(dst / "model.safetensors"))
    config = json.loads((dst / "config.json").read_text())
    quant: dict[str, object] = {"quant_method": method, "bits": 4, "group_size": group}
    if method == "awq":
        quant.update(version="gemm", zero_point=True, modules_to_not_convert=None)
    else:
        quant.update(desc_act=False, sym=False, checkpoint_format=fmt)
    config["quantization_config"] = quant
    (dst / "config.json").write_text(json.dumps(config))
    return exact, fp16
