"""Stored keys turned to new positions (context shift, `--context-shift`): a torch op on the
pool's device.

K is stored after RoPE (`rope_store.py`), so a key whose token moves from position p to
p - delta must be turned back by delta. RoPE turns each pair of dims (i, i + head_dim/2) by the
angle position * inv_freq[i], so R(p - delta) = R(-delta) R(p): one rotation by -delta * inv_freq
per row, exact up to the storage format's rounding. The table's rows may carry an attention
scaling (yarn, longrope mscale) in both cos and sin (`model/layers.py`); the row of `delta` is
divided by its norm, so the turn is a pure rotation and the scaling already in the key stays.

Formats (every `--kv-cache-dtype`): the model dtype and fp8 rotate in fp32 and round back (fp8
saturates, as the store does); int8 rows are dequantized, taken out of the Hadamard basis they
are stored in (`kv_quant.py`: H is symmetric and its own inverse), turned, put back and
quantized again with a fresh scale per row (`kv_quant.store_rows`). V is never touched.

Why torch and not a Triton kernel: a shift comes once per (max_model_len - kept tokens) generated
tokens and reads the kept keys once per layer, a gather, a few elementwise ops and a scatter of
bytes the decode steps between two shifts read thousands of times over.

Invariant: reads every source row before writing any destination row (gather, then scatter), so
`src_slots` and `dst_slots` may overlap or be equal (in place).
"""

from __future__ import annotations

import torch

from kvspill.kernels.kv_quant import int8_planes, store_rows


def shift_cos_sin(cos_sin_cache: torch.Tensor, delta: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [head_dim / 2] fp32 of the turn by +delta positions (the table's row `delta`,
    normalized); `turn_back` applies it backwards."""
    half = cos_sin_cache.shape[-1] // 2
    row = cos_sin_cache[delta].float()
    cos, sin = row[:half], row[half:]
    norm = torch.sqrt(cos * cos + sin * sin)
    return cos / norm, sin / norm


def turn_back(k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """k [..., head_dim] fp32 rotated by minus the angles of (cos, sin) [head_dim / 2] (neox halves)."""
    half = k.shape[-1] // 2
    k1, k2 = k[..., :half], k[..., half:]
    return torch.cat((k1 * cos + k2 * sin, k2 * cos - k1 * sin), dim=-1)


def shift_keys(
    kv_layer: torch.Tensor,  # [num_blocks, 2, block_size, num_kv_heads, row_dim]
    src_slots: torch.Tensor,  # [n] int64, block_id * block_size + offset
    dst_slots: torch.Tensor,  # [n] int64
    cos_sin: tuple[torch.Tensor, torch.Tensor],  # `shift_cos_sin` of the delta
    basis: torch.Tensor | None,  # [head_dim, head_dim]: an int8 layer's Hadamard basis, else None
) -> None:
    """Read the K rows at `src_slots`, turn them back by the delta of `cos_sin`, write them at
    `dst_slots` in the pool's format. All tensors on the pool's device."""
    assert src_slots.shape == dst_slots.shape and src_slots.dtype == torch.int64
    assert (basis is not None) == (kv_layer.dtype == torch.int8), "int8 layers (only) have a basis"
    if src_slots.numel() == 0:
        return
    block_size = kv_layer.shape[2]
    src = (src_slots // block_size, 0, src_slots % block_size)
    if kv_layer.dtype == torch.int8:
        values, scales = int8_planes(kv_layer)
        k = values[src].float() * scales[src].unsqueeze(-1)  # [n, num_kv_heads, head_dim]
    else:
        k = kv_layer[src].float()
    if basis is not None:
        k = k @ basis
    k = turn_back(k, *cos_sin)
    if basis is not None:
        k = k @ basis
    store_rows(kv_layer, (dst_slots // block_size, 0, dst_slots % block_size), k)


def shift_keys_ref(
    k_stored: torch.Tensor,  # [n, num_kv_heads, head_dim] fp32, as the pool holds them (no basis)
    positions: torch.Tensor,  # [n] int64, where the keys were rotated to
    delta: int,
    cos_sin_cache: torch.Tensor,
) -> torch.Tensor:
    """Torch reference by another road: undo RoPE at `positions` (the transpose of each row's
    rotation, divided by the row's squared norm), apply it at `positions - delta`, in fp64."""
    half = k_stored.shape[-1] // 2
    table = cos_sin_cache.double()
    k = k_stored.double()

    def rows(pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r = table.index_select(0, pos)
        return r[:, None, :half], r[:, None, half:]

    cos, sin = rows(positions)
    norm2 = cos * cos + sin * sin
    k1, k2 = k[..., :half], k[..., half:]
    u1, u2 = (k1 * cos + k2 * sin) / norm2, (k2 * cos - k1 * sin) / norm2  # R(p)^-1 k
    cos, sin = rows(positions - delta)
    return torch.cat((u1 * cos - u2 * sin, u2 * cos + u1 * sin), dim=-1).float()
