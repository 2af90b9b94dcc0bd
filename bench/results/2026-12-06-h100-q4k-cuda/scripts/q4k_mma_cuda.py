"""Q4_K weights x 1-64 tokens on the tensor cores in CUDA C++, built at run time by NVRTC: the
experiment of this folder (calls 1-6, ../README.md), kept here, not in the package: on an H100 it
did not beat the Triton words form (kernels/gguf_mma_words.py) on the GGUF rows as they are.

Designs (CudaConfig.design):
Both sources include `q4k_mma_common.cuh` (types, asm, the split-K store), inlined before NVRTC.

- "a" (`q4k_mma.cu`): weights, scale pairs and x staged through a cp.async ring in shared memory,
  M_TILES 16-row tiles a warp; x optionally read from global memory (x_global).
- "b" (`q4k_mma_b.cu`): each thread loads its own weight words (16-byte loads, a super-block
  ahead) straight into registers; only x is staged.
- "c" (`q4k_mma_b.cu` with TILED): b on weights repacked a 16-row tile and super-block at a time
  (`repack_tiled`), so each 16-byte load of a warp is one 512-byte run.

Shapes: x [num_tokens <= 64, in_features] bf16 / fp16, weight Q4_K [out_features, in_features]
with `scale_pairs` in x's dtype (or a TiledWeight for design c), bias [out_features] or None,
out [num_tokens, out_features] (rows may be strided) or None -> [num_tokens, out_features].

Each thread reads its words of the GGUF rows as they are and dequantizes them straight into
mma.sync fragments (the words asm's rounding: w = q * bf16(d*sc) + bf16(-dmin*m)); the column
order that gives (`q4k_mma.cu`'s header) is matched by how x's fragments are read, so neither
the file nor x is permuted. Split K is deterministic (the last block of a row tile adds the
partials in split order; its counters are reset by the kernel).
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from kvspill.kernels.gguf_formats import QuantizedWeight

logger = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("q4k_mma.cu")
MAX_TOKENS = 64
_QS_STRIDE, _PAIR_STRIDE, _X_STRIDE = 144, 48, 544  # bytes a row / a token in shared memory (q4k_mma.cu)
_COUNTERS = 65536  # row tiles a launch may have (the grid's y limit)


@dataclass(frozen=True)
class CudaConfig:
    m_tiles: int  # 16-row tiles a warp
    warps: int
    stages: int  # super-blocks in flight a block (cp.async pipeline depth)
    split_k: int = 0  # blocks a row tile along K; 0: chosen by `split_for`
    x_global: bool = False  # x's fragments read from global memory (L1 / L2), not staged in shared
    design: str = "a"  # "b": q4k_mma_b.cu (weights straight to registers, only x staged; m_tiles 1);
    # "c": b on weights repacked by `repack_tiled` (pass the repacked QuantizedWeight)
    # "d": b on the GGUF super-blocks of each 16-row tile side by side (`interleave_rows`)
    ahead: int = 1  # designs b, c, d: super-blocks of weights loaded ahead of the one computed (1, 2)

    def rows(self) -> int:
        return self.warps * 16 * self.m_tiles

    def stage_bytes(self, t_pad: int) -> int:
        if self.design in ("b", "c", "d"):
            return t_pad * 576
        return self.rows() * (_QS_STRIDE + _PAIR_STRIDE) + (0 if self.x_global else t_pad * _X_STRIDE)


def t_pad(num_tokens: int) -> int:
    """Tokens rounded up to the kernel's 8-token tiles."""
    return 8 * math.ceil(num_tokens / 8)


def default_config(num_tokens: int) -> CudaConfig:
    """Design a's first guess for this many tokens (call 1; calls 3-8 found no config of any design
    faster than the Triton words form on every shape: ../README.md)."""
    if num_tokens <= 16:
        return CudaConfig(m_tiles=2, warps=4, stages=4)
    return CudaConfig(m_tiles=2, warps=4, stages=3)


def _blocks_per_sm(cfg: CudaConfig, t_pad_: int, device: torch.device) -> int:
    props = torch.cuda.get_device_properties(device)
    smem = getattr(props, "shared_memory_per_multiprocessor", 228 * 1024)
    by_smem = smem // (cfg.stages * cfg.stage_bytes(t_pad_) + 1024)
    return max(1, min(by_smem, 2048 // (32 * cfg.warps)))


def split_for(cfg: CudaConfig, rows: int, num_sb: int, t_pad_: int, device: torch.device) -> int:
    """Blocks a row tile along K: the power of two (at most 16, at least 2 super-blocks a block)
    that fills the card's block slots best in whole waves; a larger split must gain 5% of a wave."""
    if cfg.split_k:
        return cfg.split_k
    slots = torch.cuda.get_device_properties(device).multi_processor_count * _blocks_per_sm(cfg, t_pad_, device)
    tiles = -(-rows // cfg.rows())
    best, best_fill = 1, 0.0
    for split in (1, 2, 4, 8, 16):
        if split > 1 and num_sb // split < 2:
            break
        blocks = tiles * split
        fill = blocks / (-(-blocks // slots) * slots)
        if fill > best_fill + 0.05:
            best, best_fill = split, fill
    return best


def _defines(cfg: CudaConfig, n_tiles: int, fp16: bool) -> str:
    names = {"N_TILES": n_tiles, "M_TILES": cfg.m_tiles, "FP16": int(fp16), "WARPS": cfg.warps, "STAGES": cfg.stages,
             "X_GLOBAL": int(cfg.x_global), "XSTAGES": cfg.stages, "TILED": {"c": 1, "d": 2}.get(cfg.design, 0),
             "AHEAD": cfg.ahead}
    return "".join(f"#define {k} {v}\n" for k, v in names.items())


@functools.cache
def _kernel(n_tiles: int, cfg: CudaConfig, fp16: bool, device_index: int) -> Any:
    """The compiled variant (NVRTC), its shared memory opted in."""
    stages = cfg.stages
    path = _SOURCE.with_name("q4k_mma_b.cu") if cfg.design in ("b", "c", "d") else _SOURCE
    common = _SOURCE.with_name("q4k_mma_common.cuh").read_text()  # inlined: NVRTC has no file system
    source = _defines(cfg, n_tiles, fp16) + path.read_text().replace('#include "q4k_mma_common.cuh"', common)
    with torch.cuda.device(device_index):
        kernel = torch.cuda._compile_kernel(source, "q4k_mma")
        smem = stages * cfg.stage_bytes(8 * n_tiles)
        if smem >= 48 * 1024:
            kernel.set_shared_memory_config(smem)
    return kernel


@functools.cache
def _unavailable(device_index: int) -> str | None:
    """Why the CUDA kernel cannot run on this device (None: it can): checked once a device by
    building the smallest variant."""
    major, _ = torch.cuda.get_device_capability(device_index)
    if major < 8:
        return f"compute capability {major}.x: mma.sync bf16 and cp.async need 8.0"
    if not hasattr(torch.cuda, "_compile_kernel"):
        return f"torch {torch.__version__} has no torch.cuda._compile_kernel (NVRTC)"
    try:
        _kernel(1, CudaConfig(1, 4, 2), False, device_index)
    except Exception as error:  # noqa: BLE001 - any build failure means: take the Triton kernel
        return f"NVRTC build failed: {error}"
    return None


def q4k_cuda_ready(x: torch.Tensor, weight: QuantizedWeight) -> bool:
    """Whether `q4k_matmul_cuda(x, weight)` runs: a Q4_K weight with scale pairs in x's half dtype,
    on a CUDA device that builds the kernel, at most 64 tokens (call 1's KVSPILL_Q4K_CUDA switch went
    with the wiring into gguf_mma)."""
    if weight.qtype != "Q4_K" or x.device.type != "cuda" or x.dtype not in (torch.bfloat16, torch.float16):
        return False
    pairs = weight.scale_pairs
    if pairs is None or pairs.dtype != x.dtype or not 1 <= x.shape[0] <= MAX_TOKENS:
        return False
    if weight.data.data_ptr() % 16 or weight.data.stride(0) % 16 or pairs.data_ptr() % 16:
        return False
    reason = _unavailable(x.device.index or 0)
    if reason is not None:
        _warn_once(reason)
    return reason is None


@functools.cache
def _warn_once(reason: str) -> None:
    logger.warning("the CUDA Q4_K tensor-core kernel is off (%s): the Triton kernel runs instead", reason)


_counters: dict[tuple[torch.device, int], torch.Tensor] = {}


def _stream_counters(device: torch.device) -> torch.Tensor:
    """The split-K arrival counters of the current stream (zeros; each launch leaves them zero)."""
    key = (device, torch.cuda.current_stream(device).stream_id)
    if key not in _counters:
        _counters[key] = torch.zeros(_COUNTERS, dtype=torch.int32, device=device)
    return _counters[key]


def _aligned_x(x: torch.Tensor) -> torch.Tensor:
    """x with 16-byte aligned rows (cp.async copies 16 bytes), copied only where it is not."""
    if x.stride(1) == 1 and x.stride(0) % 8 == 0 and x.data_ptr() % 16 == 0:
        return x
    return x.contiguous()


def q4k_matmul_cuda(
    x: torch.Tensor,
    weight: QuantizedWeight,
    bias: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    config: CudaConfig | None = None,
) -> torch.Tensor:
    """x @ W.T (+ bias) for a Q4_K W; see the module docstring (callers check `q4k_cuda_ready`)."""
    num_tokens, rows, k = x.shape[0], weight.out_features, weight.in_features
    assert x.shape[1] == k and k % 256 == 0, f"x has {x.shape[1]} features, weight {k} (a multiple of 256)"
    if out is None:
        out = torch.empty((num_tokens, rows), dtype=x.dtype, device=x.device)
    assert out.shape == (num_tokens, rows) and out.stride(1) == 1 and out.dtype == x.dtype, "out: [tokens, rows]"
    x = _aligned_x(x)
    pad = t_pad(num_tokens)
    cfg = config or default_config(num_tokens)
    split = split_for(cfg, rows, k // 256, pad, x.device)
    tiles = -(-rows // cfg.rows())
    part = torch.empty((split, pad, rows), dtype=torch.float32, device=x.device) if split > 1 else out
    kernel = _kernel(pad // 8, replace(cfg, split_k=0), x.dtype == torch.float16, x.device.index or 0)
    pairs = weight.scale_pairs
    assert pairs is not None
    kernel(
        grid=(split, tiles, 1),
        block=(32 * cfg.warps, 1, 1),
        args=[
            weight.data, pairs, x, bias if bias is not None else x, out, part, _stream_counters(x.device),
            rows, k // 256, num_tokens, x.stride(0), weight.data.stride(0), pairs.view(torch.int32).stride(0), out.stride(0),
            int(bias is not None), split,
        ],
        shared_mem=cfg.stages * cfg.stage_bytes(pad),
    )
    return out


@dataclass(frozen=True)
class TiledWeight:
    """A Q4_K weight in design c's layout (`repack_tiled`): what q4k_matmul_cuda reads of it."""

    data: torch.Tensor  # [rows / 16, num_sb * 2560] uint8
    scale_pairs: torch.Tensor  # the original pairs (not read: they are in `data`)
    out_features: int
    in_features: int
    qtype: str = "Q4_K"


def repack_tiled(weight: QuantizedWeight) -> TiledWeight:
    """Design c's layout (an experiment, bench/results/2026-12-06-h100-q4k-cuda): per 16-row tile
    and super-block 2,560 contiguous bytes, the qs in the order the warp's 16-byte loads take them
    ((u, r, lane): chunk 4u + t of row g + 8r) then the scale pairs ((u, r, g, j2, lo / hi)). The
    data's row stride (`data.stride(0)`) is the tile's: num_sb * 2,560; the rows a multiple of 16."""
    rows, num_sb = weight.out_features, weight.in_features // 256
    assert rows % 16 == 0 and weight.scale_pairs is not None
    tiles = rows // 16
    qs = weight.data.view(rows, num_sb, 144)[:, :, 16:].reshape(tiles, 2, 8, num_sb, 2, 4, 16)
    qs = qs.permute(0, 3, 4, 1, 2, 5, 6).reshape(tiles, num_sb, 2048)
    pairs = weight.scale_pairs.view(torch.int32).view(tiles, 2, 8, num_sb, 2, 2, 2)
    pairs = pairs.permute(0, 3, 4, 1, 2, 5, 6).reshape(tiles, num_sb, 16 * 8).view(torch.uint8)
    data = torch.cat([qs, pairs], dim=2).reshape(tiles, num_sb * 2560)
    return TiledWeight(data, weight.scale_pairs, rows, weight.in_features)


def interleave_rows(weight: QuantizedWeight) -> TiledWeight:
    """Design d's layout: the same 144-byte super-blocks and 32-byte scale pairs as the GGUF rows,
    those of one 16-row tile and super-block side by side ([tile, sb, row % 16, bytes]): a warp's
    loads of a super-block fall in one 2,304-byte run (pairs: 512). Rows a multiple of 16."""
    rows, num_sb = weight.out_features, weight.in_features // 256
    assert rows % 16 == 0 and weight.scale_pairs is not None
    tiles = rows // 16
    data = weight.data.view(tiles, 16, num_sb, 144).permute(0, 2, 1, 3).reshape(tiles, num_sb * 2304)
    pairs = weight.scale_pairs.view(torch.int32).view(tiles, 16, num_sb, 8).permute(0, 2, 1, 3)
    return TiledWeight(data, pairs.reshape(tiles, num_sb * 128), rows, weight.in_features)
