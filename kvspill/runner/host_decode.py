"""Decode attention over a KV pool in host RAM through block tables: the CPU engine's own pool
(the "gpu" tier of `--device cpu`, and of `--attention cpu` on the CPU device).

Each sequence's blocks, its partial last block included, go to the C++ kernel
(`cpu_attention.py`) in one call a layer, which reads them in place, one byte once. (The partial
block once went to torch and merged by LSE: about twenty small ops a layer, a third of the
embedded model's CPU decode step; bench/results/2026-12-07-cpu-decode-tail/.) The torch reference
(`paged_decode_attention_ref`) instead gathers each sequence's whole KV (a copy), widens it to
fp32 (a second copy) and multiplies: at long context the decode step of the CPU engine was mostly
these copies.

Shapes:
    q:            [num_seqs, num_heads, head_dim], one decode row per sequence
    kv_layer:     [num_blocks, 2, block_size, num_kv_heads, row_dim], one layer of a host pool
    block_tables: [num_seqs, max_blocks] int, seq_lens: [num_seqs] int (keys per sequence)
    out:          (o [num_seqs, num_heads, head_dim] any float dtype, lse [num_seqs, num_heads] fp32)

`DecodeParts.of` builds the kernel's parts once per step (the tables are the same in every layer).
"""

from __future__ import annotations

import numpy as np
import torch

from kvspill.kernels.cpu_attention import CpuParts, cpu_paged_attention


def decode_parts(block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int) -> CpuParts:
    """One step's decode rows as the kernel's parts: row s over its sequence's blocks, the last
    one holding seq_lens[s] - (blocks - 1) * block_size keys."""
    tables = block_tables.cpu().numpy().astype(np.int64, copy=False)
    lens = seq_lens.cpu().numpy().astype(np.int64)
    num_blocks = -(-lens // block_size)
    ids = [tables[s, : num_blocks[s]] for s in range(len(lens))]
    block_start = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(num_blocks, out=block_start[1:])
    rows = np.arange(len(lens), dtype=np.int64)
    last_tokens = np.where(num_blocks > 0, lens - (num_blocks - 1) * block_size, block_size)
    return CpuParts(
        np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64), block_start, rows, rows + 1, last_tokens
    )


def paged_decode_attention_host(
    q: torch.Tensor,
    kv_layer: torch.Tensor,
    parts: CpuParts,
    scale: float,
    out: tuple[torch.Tensor, torch.Tensor],
    num_threads: int | None = None,
) -> None:
    """Write out = (o, lse) of one decode row per sequence over its keys in a pool's layer view
    `kv_layer` [num_blocks, 2, block_size, num_kv_heads, row_dim] (`KVStorage.layer`)."""
    o, lse = out
    if o.dtype == torch.float32 and o.is_contiguous() and lse.is_contiguous():
        cpu_paged_attention(q, kv_layer, 0, parts, scale, (o, lse), num_threads)
        return
    o32 = torch.empty(q.shape, dtype=torch.float32)
    lse32 = torch.empty(q.shape[:2], dtype=torch.float32)
    cpu_paged_attention(q, kv_layer, 0, parts, scale, (o32, lse32), num_threads)
    o.copy_(o32)
    lse.copy_(lse32)
