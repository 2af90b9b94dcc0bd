"""Decode attention over a KV pool in host RAM through block tables: the CPU engine's own pool
(the "gpu" tier of `--device cpu`, and of `--attention cpu` on the CPU device).

Each sequence's full blocks go to the C++ kernel (`cpu_attention.py`), which reads them in place,
one byte once; the partial last block (fewer than block_size tokens) goes to torch; the two
partials merge by LSE. The torch reference (`paged_decode_attention_ref`) instead gathers each
sequence's whole KV (a copy), widens it to fp32 (a second copy) and multiplies: at long context
the decode step of the CPU engine was mostly these copies.

Shapes:
    q:            [num_seqs, num_heads, head_dim], one decode row per sequence
    kv_layer:     [num_blocks, 2, block_size, num_kv_heads, row_dim], one layer of a host pool
    block_tables: [num_seqs, max_blocks] int, seq_lens: [num_seqs] int (keys per sequence)
    out:          (o [num_seqs, num_heads, head_dim] any float dtype, lse [num_seqs, num_heads] fp32)

`DecodeParts.of` builds the kernel's parts once per step (the tables are the same in every layer).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from kvspill.attention.cold.merge import attend_unmasked_ref, merge_partials
from kvspill.kernels.cpu_attention import CpuParts, cpu_paged_attention
from kvspill.kernels.kv_quant import dequantize_kv


@dataclass(frozen=True)
class DecodeParts:
    """One step's decode rows: the full blocks for the kernel, and each partial last block."""

    full: CpuParts  # part s: row s over its sequence's full blocks
    tails: list[tuple[int, int, int]]  # (row, block id, tokens in it) of each partial last block

    @staticmethod
    def of(block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int) -> DecodeParts:
        tables = block_tables.cpu().numpy().astype(np.int64, copy=False)
        lens = seq_lens.cpu().numpy().astype(np.int64)
        num_full = lens // block_size
        ids = [tables[s, : num_full[s]] for s in range(len(lens))]
        block_start = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(num_full, out=block_start[1:])
        rows = np.arange(len(lens), dtype=np.int64)
        full = CpuParts(
            np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64), block_start, rows, rows + 1
        )
        tails = [
            (s, int(tables[s, num_full[s]]), int(lens[s] % block_size))
            for s in range(len(lens))
            if lens[s] % block_size
        ]
        return DecodeParts(full, tails)


def paged_decode_attention_host(
    q: torch.Tensor,
    kv_layer: torch.Tensor,
    parts: DecodeParts,
    scale: float,
    out: tuple[torch.Tensor, torch.Tensor],
    num_threads: int | None = None,
) -> None:
    """Write out = (o, lse) of one decode row per sequence over its keys in a pool's layer view
    `kv_layer` [num_blocks, 2, block_size, num_kv_heads, row_dim] (`KVStorage.layer`)."""
    o, lse = out
    o32 = torch.zeros(q.shape, dtype=torch.float32)
    lse32 = torch.full(q.shape[:2], float("-inf"), dtype=torch.float32)
    cpu_paged_attention(q, kv_layer, 0, parts.full, scale, (o32, lse32), num_threads)
    if parts.tails:
        for row, block, tokens in parts.tails:
            kv = dequantize_kv(kv_layer[block])[:, :tokens]  # [2, tokens, num_kv_heads, head_dim]
            o_t, lse_t = attend_unmasked_ref(q[row : row + 1], kv[0], kv[1], scale)
            merged_o, merged_lse = merge_partials(o32[row : row + 1], lse32[row : row + 1], o_t, lse_t)
            o32[row], lse32[row] = merged_o[0], merged_lse[0]
    o.copy_(o32)
    lse.copy_(lse32)
