"""Fixtures for the kernel tests: the device, and a builder of random paged KV caches.

Without CUDA the Triton kernels run on the CPU through Triton's interpreter. The interpreter is
chosen when a kernel module is imported (at `@triton.jit`), so the root tests/conftest.py sets
TRITON_INTERPRET before any test module imports kvspill.kernels.

Invariants of `build_paged_kv`:
- The cache holds `num_layers` layers; only `layer` holds the seqs' K/V, the other layers are
  random, so a kernel that ignores the layer view's strides reads wrong values.
- In the attended layer every slot that no seq owns (free blocks, the tail of each seq's last
  block, the padding block that fills block tables) is NaN: reading one shows up as NaN.
- Block ids are a random permutation: tables are never in order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class PagedKV:
    kv_cache: torch.Tensor  # [num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim]
    kv_layer: torch.Tensor  # [num_blocks, 2, block_size, num_kv_heads, head_dim], a strided view
    block_tables: torch.Tensor  # [num_seqs, max_blocks_per_seq] int32, padded with a NaN block
    seq_lens: torch.Tensor  # [num_seqs] int32
    keys: list[torch.Tensor]  # per seq [seq_len, num_kv_heads, head_dim]
    values: list[torch.Tensor]  # per seq [seq_len, num_kv_heads, head_dim]


def build_paged_kv(
    seq_lens: list[int],
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    device: str = DEVICE,
    num_layers: int = 2,
    layer: int = 1,
    num_free_blocks: int = 2,
    seed: int = 0,
) -> PagedKV:
    """Random K/V for seqs of the given lengths, scattered into shuffled blocks of one layer."""
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(blocks_per_seq) + num_free_blocks + 1  # + 1: the padding block
    shape = (num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim)
    kv_cache = torch.randn(shape, generator=gen).to(dtype)
    kv_cache[:, layer] = float("nan")
    block_ids = torch.randperm(num_blocks, generator=gen)
    pad_block = int(block_ids[-1])
    max_blocks = max(blocks_per_seq, default=0) + 1  # at least one padding column
    block_tables = torch.full((len(seq_lens), max_blocks), pad_block, dtype=torch.int32)
    keys, values = [], []
    next_id = 0
    for s, (seq_len, num_seq_blocks) in enumerate(zip(seq_lens, blocks_per_seq, strict=True)):
        ids = block_ids[next_id : next_id + num_seq_blocks]
        next_id += num_seq_blocks
        block_tables[s, :num_seq_blocks] = ids.to(torch.int32)
        k = torch.randn((seq_len, num_kv_heads, head_dim), generator=gen).to(dtype)
        v = torch.randn((seq_len, num_kv_heads, head_dim), generator=gen).to(dtype)
        pos = torch.arange(seq_len)
        kv_cache[ids[pos // block_size], layer, 0, pos % block_size] = k
        kv_cache[ids[pos // block_size], layer, 1, pos % block_size] = v
        keys.append(k.to(device))
        values.append(v.to(device))
    kv_cache = kv_cache.to(device)
    return PagedKV(
        kv_cache=kv_cache,
        kv_layer=kv_cache[:, layer],
        block_tables=block_tables.to(device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        keys=keys,
        values=values,
    )


def dense_causal_attention_f64(
    q: torch.Tensor,  # [q_len, num_heads, head_dim]
    k: torch.Tensor,  # [seq_len, num_kv_heads, head_dim]
    v: torch.Tensor,  # [seq_len, num_kv_heads, head_dim]
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The plainest attention there is, in float64: query i at seq_len - q_len + i sees keys
    0..its position. Returns o [q_len, num_heads, head_dim] and lse [q_len, num_heads]."""
    q_len, num_heads, _ = q.shape
    seq_len, num_kv_heads, _ = k.shape
    group = num_heads // num_kv_heads
    kk = k.double().repeat_interleave(group, dim=1)  # [seq_len, num_heads, head_dim]
    vv = v.double().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), kk) * scale  # [num_heads, q_len, seq_len]
    q_pos = torch.arange(seq_len - q_len, seq_len, device=q.device)
    visible = torch.arange(seq_len, device=q.device)[None, :] <= q_pos[:, None]
    scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [num_heads, q_len]
    o = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), vv)
    return o, lse.transpose(0, 1)


TOLERANCES = {
    # Outputs are |x| < ~3. bf16 gets 2 ulps: Triton's interpreter truncates fp32 -> bf16.
    torch.float32: {"atol": 3e-5, "rtol": 1e-5},
    torch.float16: {"atol": 3e-3, "rtol": 2e-3},
    torch.bfloat16: {"atol": 3e-2, "rtol": 2e-2},
}


@pytest.fixture
def device() -> str:
    return DEVICE


@pytest.fixture
def make_paged_kv() -> Callable[..., PagedKV]:
    return build_paged_kv


@pytest.fixture
def dense_attention() -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    return dense_causal_attention_f64


@pytest.fixture
def tol() -> dict[torch.dtype, dict[str, float]]:
    return TOLERANCES
