"""GGUF quantized-weight block layouts, the `QuantizedWeight` record, and torch reference dequantizers.

A quantized weight stays in GGUF's own bytes on the device: `data` is uint8
[out_features, bytes_per_row], each row `in_features // block_size` blocks of `type_size` bytes
laid end to end (ggml's row-major order: a GGUF tensor of ggml shape [in, out] is `out` rows).

Block layouts (byte offsets; fp16 fields little-endian; q = the integer quant of element j):
    Q4_0 (32 w, 18 B):  d@0 f16 | qs[16]@2          w = d * (q - 8); q: low nibbles j<16, high j>=16
    Q4_1 (32 w, 20 B):  d@0 | m@2 | qs[16]@4         w = d * q + m
    Q5_0 (32 w, 22 B):  d@0 | qh u32@2 | qs[16]@6     w = d * ((q | qh_bit_j << 4) - 16)
    Q5_1 (32 w, 24 B):  d@0 | m@2 | qh@4 | qs[16]@8   w = d * (q | qh_bit_j << 4) + m
    Q8_0 (32 w, 34 B):  d@0 | qs int8[32]@2           w = q * d
    Q4_K (256 w, 144 B): d@0 | dmin@2 | scales[12]@4 | qs[128]@16
        8 sub-blocks of 32: w = (d * sc) * q - dmin * m, 6-bit sc/m packed in the 12 scale bytes;
        sub-block s takes the (s % 2) nibble of qs[(s // 2) * 32 : +32]
    Q5_K (256 w, 176 B): d@0 | dmin@2 | scales[12]@4 | qh[32]@16 | qs[128]@48
        as Q4_K, q |= bit s of qh[l] << 4 for element l of sub-block s
    Q6_K (256 w, 210 B): ql[128]@0 | qh[64]@128 | scales int8[16]@192 | d@208
        16 sub-blocks of 16: w = (d * sc) * (q - 32), q = 4 bits of ql | 2 bits of qh << 4

Invariants:
- Sizes come from `gguf.constants.GGML_QUANT_SIZES`; the offsets above are ggml's structs.
- `dequantize_ref` equals `gguf.quants.dequantize` bit for bit in float32: it does gguf's fp32
  operations in gguf's order (e.g. (d * sc) * q - dmin * m, never a fused multiply-add); other
  dtypes are that float32 result rounded once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from kvspill.errors import UnsupportedModelError

SUPPORTED_TYPES: tuple[str, ...] = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K")


@dataclass(frozen=True)
class QuantFormat:
    """One GGUF quant type: `block_size` weights stored in `type_size` bytes."""

    name: str
    ggml_type: int
    block_size: int
    type_size: int
    f16_offsets: tuple[int, ...]  # byte offsets of the block's fp16 scale fields (d, m / dmin)


_F16_OFFSETS = {"Q6_K": (208,), "Q4_0": (0,), "Q5_0": (0,), "Q8_0": (0,)}  # the others: d@0, m/dmin@2


def _format(name: str) -> QuantFormat:
    ggml_type = GGMLQuantizationType[name]
    block_size, type_size = GGML_QUANT_SIZES[ggml_type]
    return QuantFormat(name, int(ggml_type), block_size, type_size, _F16_OFFSETS.get(name, (0, 2)))


FORMATS: dict[str, QuantFormat] = {name: _format(name) for name in SUPPORTED_TYPES}


def check_supported(qtype: str | int | GGMLQuantizationType) -> QuantFormat:
    """The format of `qtype` (a name such as "Q4_K", or a ggml type id); raises
    UnsupportedModelError naming the type and the supported list if kvspill cannot run it."""
    if isinstance(qtype, str):
        name = qtype.upper()
    else:
        try:
            name = GGMLQuantizationType(int(qtype)).name
        except ValueError:
            name = f"ggml type id {int(qtype)}"
    if name not in FORMATS:
        raise UnsupportedModelError(
            f"GGUF tensor type {name} is not supported on the quantized-weight path; "
            f"supported types: {', '.join(SUPPORTED_TYPES)}. Use a GGUF file quantized to one of "
            "these (or F16/BF16/F32 weights)."
        )
    return FORMATS[name]


# The split Q6_K layout (`QuantizedWeight.split`, `split_q6k_rows`): each row's super-blocks'
# 192-byte quant parts (ql, qh) first, then their 18-byte scale parts (scales, d). The same bytes
# as gguf's 210-byte super-blocks, but the quants 16-byte aligned where the row is, so the GPU
# kernels load them in 16-byte words: gguf's layout leaves them 2-byte aligned (its 8-token
# tensor-core loop: 57 two-byte loads and 48 shared-memory stores a super-block a thread against
# 22 pipelined 16-byte copies; bench/results/2026-12-04-h200-scale-pairs/).
Q6K_QUANT_BYTES = 192
Q6K_SCALE_BYTES = 18


@dataclass(frozen=True)
class QuantizedWeight:
    """A linear layer's weight kept in GGUF bytes: data uint8 [out_features, bytes_per_row].
    A Q4_K weight may carry its `scale_pairs` (kernels/gguf_mma_words.pack_scales: bf16 or fp16
    [out_features, in_features / 16]), which the tensor-core kernel reads in place of the
    super-blocks' scale bytes when x has their dtype. A Q6_K weight's rows may be in the split
    layout (`split`: `split_q6k_rows`), which the GPU kernels read; the torch references take
    gguf's (`gguf_rows`)."""

    data: torch.Tensor
    qtype: str
    out_features: int
    in_features: int
    scale_pairs: torch.Tensor | None = None
    split: bool = False

    def __post_init__(self) -> None:
        fmt = check_supported(self.qtype)
        object.__setattr__(self, "qtype", fmt.name)
        assert self.in_features % fmt.block_size == 0, (
            f"{fmt.name}: in_features {self.in_features} is not a multiple of the block {fmt.block_size}"
        )
        expected = (self.out_features, self.bytes_per_row)
        assert self.data.dtype == torch.uint8 and tuple(self.data.shape) == expected, (
            f"{fmt.name} data must be uint8 {expected}, got {self.data.dtype} {tuple(self.data.shape)}"
        )
        assert self.data.stride(1) == 1, "rows of a quantized weight must be contiguous"
        pairs = self.scale_pairs
        assert pairs is None or (
            self.qtype == "Q4_K"
            and pairs.dtype in (torch.bfloat16, torch.float16)
            and tuple(pairs.shape) == (self.out_features, self.in_features // 16)
            and pairs.is_contiguous()
            and pairs.device == self.data.device
        ), (
            "scale_pairs are pack_scales' contiguous bf16 / fp16 [out_features, in_features / 16] of a Q4_K weight"
        )
        assert not self.split or self.qtype == "Q6_K", f"only Q6_K rows have a split layout, not {self.qtype}"
        assert not self.split or split_rows_aligned(self.data), (
            "split Q6_K rows must start 4-byte aligned (an even count of super-blocks a row): the GPU "
            "kernels load their quants as 4-byte words"
        )

    @property
    def format(self) -> QuantFormat:
        return FORMATS[self.qtype]

    @property
    def bytes_per_row(self) -> int:
        return self.in_features // self.format.block_size * self.format.type_size

    @property
    def nbytes(self) -> int:
        """The bytes held: the blocks and, where attached, the scale pairs."""
        pairs = 0 if self.scale_pairs is None else self.scale_pairs.numel() * self.scale_pairs.element_size()
        return self.out_features * self.bytes_per_row + pairs

    @property
    def device(self) -> torch.device:
        return self.data.device

    def to(self, device: torch.device | str) -> QuantizedWeight:
        pairs = None if self.scale_pairs is None else self.scale_pairs.to(device)
        return replace(self, data=self.data.to(device), scale_pairs=pairs)

    def rows(self, start: int, end: int) -> QuantizedWeight:
        """Rows [start, end) as a weight of their own (a view; the scale pairs are left behind)."""
        return replace(self, data=self.data[start:end], out_features=end - start, scale_pairs=None)

    def gguf_rows(self) -> torch.Tensor:
        """The rows in gguf's layout (a copy where they are split): what the torch references read."""
        return join_q6k_rows(self.data) if self.split else self.data

    @classmethod
    def from_raw(cls, raw: np.ndarray | torch.Tensor, qtype: str | int) -> QuantizedWeight:
        """From GGUF bytes [out_features, bytes_per_row] (e.g. a GGUFReader tensor's `.data`)."""
        fmt = check_supported(qtype)
        if isinstance(raw, np.ndarray):  # a read-only memmap slice is copied (torch wants writable)
            raw = torch.from_numpy(np.require(raw, requirements=("C", "W")))
        data = raw
        data = data.view(torch.uint8).reshape(data.shape[0], -1)
        in_features = data.shape[1] // fmt.type_size * fmt.block_size
        return cls(data, fmt.name, data.shape[0], in_features)


def random_quantized(
    qtype: str,
    out_features: int,
    in_features: int,
    generator: torch.Generator | None = None,
    scale: float = 0.01,
) -> QuantizedWeight:
    """Random but valid blocks (tests, benchmarks): random quant bytes, fp16 scale fields
    normal(0, scale) so no NaN or inf. Drawn on the generator's device (the CPU without one)."""
    fmt = check_supported(qtype)
    num_blocks = in_features // fmt.block_size
    shape = (out_features, num_blocks, fmt.type_size)
    device = generator.device if generator is not None else torch.device("cpu")
    blocks = torch.randint(0, 256, shape, dtype=torch.uint8, device=device, generator=generator)
    for offset in fmt.f16_offsets:
        d = torch.randn((out_features, num_blocks, 1), device=device, generator=generator) * scale
        blocks[..., offset : offset + 2] = d.half().view(torch.uint8)
    return QuantizedWeight(blocks.reshape(out_features, -1), fmt.name, out_features, in_features)


def split_rows_aligned(data: torch.Tensor) -> bool:
    """Whether Q6_K rows `data` may take the split layout: every row starts 4-byte aligned, so its
    quant part is (an even count of super-blocks a row; 16-byte aligned from a multiple of 8)."""
    return data.data_ptr() % 4 == 0 and (data.shape[0] <= 1 or data.stride(0) % 4 == 0)


def split_q6k_rows(data: torch.Tensor) -> torch.Tensor:
    """Q6_K rows [rows, nb * 210] in gguf's layout -> the split layout (a new tensor): each row's
    nb quant parts (the first 192 bytes of each super-block), then its nb scale parts (the last 18)."""
    rows, nbytes = data.shape
    blocks = data.reshape(rows, nbytes // 210, 210)
    quants = blocks[..., :Q6K_QUANT_BYTES].reshape(rows, -1)
    return torch.cat([quants, blocks[..., Q6K_QUANT_BYTES:].reshape(rows, -1)], dim=1)


def join_q6k_rows(data: torch.Tensor) -> torch.Tensor:
    """The inverse of `split_q6k_rows` (a new tensor in gguf's layout)."""
    rows, nbytes = data.shape
    nb = nbytes // 210
    quants = data[:, : nb * Q6K_QUANT_BYTES].reshape(rows, nb, Q6K_QUANT_BYTES)
    scales = data[:, nb * Q6K_QUANT_BYTES :].reshape(rows, nb, Q6K_SCALE_BYTES)
    return torch.cat([quants, scales], dim=2).reshape(rows, nbytes)


# ---- torch references: fields of blocks [rows, num_blocks, type_size] uint8 ----


def _f16(blocks: torch.Tensor, offset: int) -> torch.Tensor:
    """The fp16 field at `offset` of each block as float32 [rows, num_blocks, 1] (exact)."""
    return blocks[..., offset : offset + 2].contiguous().view(torch.float16).float()


def _fields(x: torch.Tensor, width: int, count: int) -> torch.Tensor:
    """[..., n] bytes -> [..., count, n]: the `width`-bit field i of byte l at [..., i, l]."""
    shifts = torch.arange(0, width * count, width, dtype=torch.uint8, device=x.device)
    return (x.unsqueeze(-2) >> shifts[:, None]) & ((1 << width) - 1)


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    """[..., n] bytes -> [..., 2 * n] nibbles: the n low ones, then the n high ones (ggml order)."""
    return _fields(qs, 4, 2).flatten(-2)


def _legacy(blocks: torch.Tensor, qtype: str) -> torch.Tensor:
    """Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 -> float32 [rows, num_blocks, 32]."""
    d = _f16(blocks, 0)
    if qtype == "Q8_0":
        return blocks[..., 2:34].view(torch.int8).float() * d
    qs_at = {"Q4_0": 2, "Q4_1": 4, "Q5_0": 6, "Q5_1": 8}[qtype]
    q = _nibbles(blocks[..., qs_at : qs_at + 16]).to(torch.int16)
    if qtype in ("Q5_0", "Q5_1"):
        qh_at = qs_at - 4
        # Bit j of the little-endian u32 is bit j % 8 of its byte j // 8.
        qh = _fields(blocks[..., qh_at : qh_at + 4], 1, 8).transpose(-1, -2).reshape(q.shape)
        q = q | (qh.to(torch.int16) << 4)
    if qtype == "Q4_0":
        return d * (q - 8).float()
    if qtype == "Q5_0":
        return d * (q - 16).float()
    return d * q.float() + _f16(blocks, 2)  # Q4_1, Q5_1: d * q + m


def _k_scale_min(scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The 8 6-bit (scale, min) pairs of Q4_K/Q5_K from their 12 packed bytes -> 2 x [..., 8]."""
    d, m, m_d = scales[..., 0:4], scales[..., 4:8], scales[..., 8:12]
    sc = torch.cat((d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)), dim=-1)
    mins = torch.cat((m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)), dim=-1)
    return sc, mins


def _k_quants(blocks: torch.Tensor, qtype: str) -> torch.Tensor:
    """Q4_K, Q5_K, Q6_K -> float32 [rows, num_blocks, 256]."""
    rows, nb = blocks.shape[:2]
    if qtype == "Q6_K":
        scale, q = _q6k_sub_blocks(blocks)
        return (scale.unsqueeze(-1) * (q.float() - 32)).reshape(rows, nb, 256)
    scale, offset, q = _k_sub_blocks(blocks, qtype)
    return (scale * q.float() - offset).reshape(rows, nb, 256)


def _k_scales(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K, Q5_K blocks (or their first 16 bytes) -> (d * sc, dmin * m) float32 [..., 8]."""
    sc, mins = _k_scale_min(blocks[..., 4:16])
    return _f16(blocks, 0) * sc.float(), _f16(blocks, 2) * mins.float()


def _k_sub_blocks(blocks: torch.Tensor, qtype: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q4_K, Q5_K blocks -> (d * sc, dmin * m) float32 [rows, nb, 8, 1] each and q [rows, nb, 8, 32]
    uint8 of the 8 sub-blocks: weight l of sub-block s is d * sc_s * q_sl - dmin * m_s."""
    rows, nb = blocks.shape[:2]
    scale, offset = _k_scales(blocks)
    scale, offset = scale.unsqueeze(-1), offset.unsqueeze(-1)
    qs_at = 16 if qtype == "Q4_K" else 48
    q = _nibbles(blocks[..., qs_at : qs_at + 128].reshape(rows, nb, 4, 32)).reshape(rows, nb, 8, 32)
    if qtype == "Q5_K":
        q = q | (_fields(blocks[..., 16:48], 1, 8) << 4)
    return scale, offset, q


def block_offsets(data: torch.Tensor, qtype: str, in_features: int) -> torch.Tensor:
    """The constant term of each 32-weight block (weight = scaled quant + offset) -> float32
    [rows, K / 32]: Q4_1 / Q5_1 m, Q4_K / Q5_K -dmin * m, 0 for the types without one."""
    fmt = check_supported(qtype)
    rows, nb = data.shape[0], in_features // fmt.block_size
    blocks = data.reshape(rows, nb, fmt.type_size)
    if qtype in ("Q4_1", "Q5_1"):
        return _f16(blocks, 2).reshape(rows, nb)
    if qtype in ("Q4_K", "Q5_K"):
        return -_k_sub_blocks(blocks, qtype)[1].reshape(rows, nb * 8)
    return torch.zeros((rows, in_features // 32), dtype=torch.float32, device=data.device)


def _q6k_sub_blocks(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q6_K blocks [rows, nb, 210] -> d * scale float32 [rows, nb, 16] and the unsigned quants q
    uint8 [rows, nb, 16, 16] of the 16-weight groups (weight = d * scale * (q - 32))."""
    rows, nb = blocks.shape[:2]
    scale = _f16(blocks, 208) * blocks[..., 192:208].view(torch.int8).float()
    ql = _nibbles(blocks[..., 0:128].reshape(rows, nb, 2, 64))  # [rows, nb, 2, 128]
    qh = _fields(blocks[..., 128:192].reshape(rows, nb, 2, 32), 2, 4)  # [rows, nb, 2, 4, 32]
    return scale, (ql.reshape(rows, nb, 2, 4, 32) | (qh << 4)).reshape(rows, nb, 16, 16)


def q6k_fields(data: torch.Tensor, in_features: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Q6_K data [rows, bytes] -> `_q6k_sub_blocks` in K order: [rows, K / 16], [rows, K / 16, 16]."""
    rows = data.shape[0]
    scale, q = _q6k_sub_blocks(data.reshape(rows, in_features // 256, 210))
    return scale.reshape(rows, -1), q.reshape(rows, -1, 16)


def q4k_fields(
    data: torch.Tensor, in_features: int, qtype: str = "Q4_K"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q4_K (or Q5_K) data [rows, bytes] -> per sub-block of 32 (in K order): d * sc and dmin * m
    float32 [rows, K / 32] and the quants q uint8 [rows, K / 32, 32] (Q5_K's with their fifth bit;
    the reference of kernels that keep the scale out of the sum)."""
    rows = data.shape[0]
    blocks = data.reshape(rows, in_features // 256, FORMATS[qtype].type_size)
    scale, offset, q = _k_sub_blocks(blocks, qtype)
    return scale.reshape(rows, -1), offset.reshape(rows, -1), q.reshape(rows, -1, 32)


def q41_fields(data: torch.Tensor, in_features: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q4_1 data [rows, bytes] -> per block of 32 (in K order): d and m float32 [rows, K / 32] and
    the quants q uint8 [rows, K / 32, 32] (w = d * q + m; the reference of kernels that keep d out
    of the sum)."""
    rows = data.shape[0]
    blocks = data.reshape(rows, in_features // 32, 20)
    q = _nibbles(blocks[..., 4:20])
    return _f16(blocks, 0).reshape(rows, -1), _f16(blocks, 2).reshape(rows, -1), q


def q80_fields(data: torch.Tensor, in_features: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Q8_0 data [rows, bytes] -> per block of 32 (in K order): d float32 [rows, K / 32] and the
    quants q int8 [rows, K / 32, 32] (w = d * q)."""
    rows = data.shape[0]
    blocks = data.reshape(rows, in_features // 32, 34)
    return _f16(blocks, 0).reshape(rows, -1), blocks[..., 2:34].contiguous().view(torch.int8)


def q4k_scales(data: torch.Tensor, in_features: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K data [rows, bytes] -> d * sc and dmin * m float32 [rows, K / 32] (in K order), from
    the super-blocks' headers alone: `q4k_fields` without the quants."""
    rows = data.shape[0]
    scale, offset = _k_scales(data.reshape(rows, in_features // 256, 144)[..., :16])
    return scale.reshape(rows, -1), offset.reshape(rows, -1)


def dequantize_ref(
    data: torch.Tensor,  # uint8 [rows, bytes_per_row]
    qtype: str,
    in_features: int,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Torch reference dequantizer -> [rows, in_features] of `dtype` (float32 math, then one cast)."""
    fmt = check_supported(qtype)
    rows = data.shape[0]
    num_blocks = in_features // fmt.block_size
    assert data.dtype == torch.uint8 and data.shape == (rows, num_blocks * fmt.type_size), (
        f"{fmt.name} data for {in_features} features must be uint8 [rows, {num_blocks * fmt.type_size}], "
        f"got {data.dtype} {tuple(data.shape)}"
    )
    blocks = data.reshape(rows, num_blocks, fmt.type_size)
    if fmt.block_size == 32:
        out = _legacy(blocks, fmt.name)
    else:
        out = _k_quants(blocks, fmt.name)
    return out.reshape(rows, in_features).to(dtype)
