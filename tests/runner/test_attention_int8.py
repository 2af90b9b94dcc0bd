"""--kv-cache-dtype int8 in the attention backend: the CUDA code path (RoPE kernel, Hadamard basis
change, Triton store and attention kernels; run here through Triton's interpreter) equals the
torch path, and both stay within int8's error of attention over an fp32 pool."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from step_inputs import step_over_random_blocks

from kvspill.kernels.fused_ops import apply_rope_ref
from kvspill.kernels.kv_quant import dequantize_kv, hadamard, int8_scales, quantize_kv, rotate, rotate_rows
from kvspill.runner.attention import PagedAttention, build_attention_metadata
from kvspill.storage.storage import KVLayout, KVStorage

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, NUM_BLOCKS = 4, 2, 32, 4, 40
SEQS = [(13, 1), (0, 9), (22, 5)]  # (num_computed_tokens, num_new_tokens): a decode, two chunks


def _step(dtype: torch.dtype, g: torch.Generator):
    layout = KVLayout(
        num_layers=1, block_size=BLOCK_SIZE, num_kv_heads=NUM_KV_HEADS, head_dim=HEAD_DIM, dtype=dtype
    )
    storage = KVStorage(layout, NUM_BLOCKS, torch.device("cpu"))
    return storage, step_over_random_blocks(SEQS, NUM_BLOCKS, BLOCK_SIZE, g)


def _fill_context(storage: KVStorage, kv: torch.Tensor) -> None:
    """Earlier tokens' K/V (`kv`, plain values) as each format stores them: int8 pools hold the
    Hadamard-basis values (what the backend writes); the step's own slots are overwritten."""
    if storage.rotation(0) is None:
        storage.layer(0).copy_(kv)
    else:
        storage.layer(0).copy_(quantize_kv(rotate(kv, storage.rotation(0)), torch.int8))


@pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="runs the CUDA code path on CPU tensors under Triton's interpreter; on a GPU host the "
    "kernels compile and the engine benchmarks run this path",
)
def test_cuda_path_equals_torch_path_and_fp32_pool():
    g = torch.Generator().manual_seed(0)
    num_tokens = sum(n for _, n in SEQS)
    q0, k0, v0 = (
        torch.randn(num_tokens, h, HEAD_DIM, generator=g) for h in (NUM_HEADS, NUM_KV_HEADS, NUM_KV_HEADS)
    )
    angles = torch.rand((64, HEAD_DIM // 2), generator=g) * 6.28
    cos_sin = torch.cat((angles.cos(), angles.sin()), dim=-1)
    context = torch.randn((NUM_BLOCKS, 2, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM), generator=g)
    outs, pools = {}, {}
    for name, dtype, fused in (
        ("torch", torch.int8, False),
        ("cuda", torch.int8, True),
        ("fp32", torch.float32, False),
    ):
        storage, inputs = _step(dtype, torch.Generator().manual_seed(1))
        _fill_context(storage, context)
        positions = torch.from_numpy(np.asarray(inputs.positions))
        attn = PagedAttention(storage, build_attention_metadata(inputs, storage.device, None), HEAD_DIM**-0.5)
        q, k, v = q0.clone(), k0.clone(), v0.clone()
        if fused:  # as on CUDA: the Triton kernels, RoPE handed to the backend
            attn.use_triton = attn.fuses_rope = True
            outs[name] = attn(0, q, k, v, (positions, cos_sin))
        else:
            apply_rope_ref(q, k, positions, cos_sin)
            outs[name] = attn(0, q, k, v)
        pools[name] = storage.layer(0).clone()
    torch.testing.assert_close(outs["cuda"], outs["torch"], atol=1e-4, rtol=1e-4)
    scale = int8_scales(pools["torch"])
    assert (
        (dequantize_kv(pools["cuda"]) - dequantize_kv(pools["torch"])).abs() <= scale[..., None] * 1.001
    ).all()
    # int8 of the Hadamard-basis K/V: attention within a few percent of the fp32 pool's
    err = (outs["torch"] - outs["fp32"]).abs().max().item()
    assert err < 0.05 * outs["fp32"].abs().max().item(), err


def test_rotating_stacked_rows_equals_rotating_each_tensor():
    """q, k and v turn into the basis in one matmul (an 8-row fp32 matmul alone took 53 us on an
    H200): the same values, shapes and fp32 dtype as one `rotate` each, strided views included."""
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(3, 9 * 64 + 2 * 3 * 64, generator=g, dtype=torch.bfloat16)
    q = qkv[:, : 9 * 64].view(3, 9, 64)
    k = qkv[:, 9 * 64 : 12 * 64].view(3, 3, 64)
    v = qkv[:, 12 * 64 :].view(3, 3, 64)
    basis = hadamard(64)
    got = rotate_rows((q, k, v), basis)
    for x, y in zip((q, k, v), got, strict=True):
        assert y.dtype == torch.float32 and y.shape == x.shape
        torch.testing.assert_close(y, rotate(x, basis), rtol=1e-6, atol=1e-6)
