"""A pure decode step hands RoPE and the K/V store to the decode kernel (`NewKV`): the CUDA code
path (run here through Triton's interpreter) gives the same output and pool as with the
rope_store kernel (KVSPILL_FUSED_ROPE_DECODE=0), and steps with a prefill chunk keep that kernel."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from step_inputs import step_over_random_blocks

import kvspill.runner.attention as runner_attention
from kvspill.runner.attention import PagedAttention, build_attention_metadata
from kvspill.storage.storage import KVLayout, KVStorage

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, NUM_BLOCKS = 4, 2, 32, 4, 40
DECODES = [(13, 1), (22, 1), (3, 1)]  # (num_computed_tokens, num_new_tokens)
MIXED = [(13, 1), (0, 9)]  # a decode and a prefill chunk


def _run(seqs, fused: bool, monkeypatch) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The layer's output, its pool and how many times the rope_store kernel ran."""
    g = torch.Generator().manual_seed(0)
    num_tokens = sum(n for _, n in seqs)
    q, k, v = (
        torch.randn(num_tokens, h, HEAD_DIM, generator=g) for h in (NUM_HEADS, NUM_KV_HEADS, NUM_KV_HEADS)
    )
    angles = torch.rand((64, HEAD_DIM // 2), generator=g) * 6.28
    cos_sin = torch.cat((angles.cos(), angles.sin()), dim=-1)
    layout = KVLayout(
        num_layers=1, block_size=BLOCK_SIZE, num_kv_heads=NUM_KV_HEADS, head_dim=HEAD_DIM, dtype=torch.float32
    )
    storage = KVStorage(layout, NUM_BLOCKS, torch.device("cpu"))
    storage.layer(0).copy_(torch.randn(storage.layer(0).shape, generator=g))
    inputs = step_over_random_blocks(seqs, NUM_BLOCKS, BLOCK_SIZE, torch.Generator().manual_seed(1))
    positions = torch.from_numpy(np.asarray(inputs.positions))
    calls = []
    real = runner_attention.rope_and_store_kv
    monkeypatch.setattr(runner_attention, "rope_and_store_kv", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setenv("KVSPILL_FUSED_ROPE_DECODE", "1" if fused else "0")
    attn = PagedAttention(storage, build_attention_metadata(inputs, storage.device, None), HEAD_DIM**-0.5)
    attn.use_triton = attn.fuses_rope = True  # the CUDA code path: Triton kernels, RoPE handed over
    attn.host_kernel = False
    q_in, k_in = q.clone(), k.clone()
    out = attn(0, q_in, k_in, v, (positions, cos_sin))
    if fused and not calls:
        assert torch.equal(q_in, q) and torch.equal(k_in, k), "the fused path leaves q and k as given"
    return out, storage.layer(0).clone(), len(calls)


@pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="runs the CUDA code path on CPU tensors under Triton's interpreter; on a GPU host the "
    "kernels compile and tests/kernels/test_decode_attention.py checks them",
)
@pytest.mark.parametrize("seqs, fused_calls", [(DECODES, 0), (MIXED, 1)])
def test_decode_step_takes_rope_and_store(seqs, fused_calls, monkeypatch):
    out_a, pool_a, calls_a = _run(seqs, False, monkeypatch)
    out_b, pool_b, calls_b = _run(seqs, True, monkeypatch)
    assert calls_a == 1 and calls_b == fused_calls
    assert torch.equal(pool_b, pool_a)
    torch.testing.assert_close(out_b, out_a, atol=0, rtol=0)
