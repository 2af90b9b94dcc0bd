"""Mixed KV pools (`--kv-cache-dtype-skip-layers`, storage/layout.py): each layer's typed view of the
raw-byte pool, the tiers' copies and reads, and attention over a layer of a mixed pool equal to
attention over a uniform pool of that layer's format (the torch path, and the CUDA path's Triton
kernels under the interpreter)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from step_inputs import step_over_random_blocks

from kvspill.config import EngineConfig
from kvspill.errors import InvalidParameterError
from kvspill.kernels.fused_ops import apply_rope_ref
from kvspill.kernels.kv_quant import quantize_kv, rotate
from kvspill.runner.attention import PagedAttention, build_attention_metadata
from kvspill.storage.layout import KVLayout, engine_layout, layer_formats
from kvspill.storage.storage import KVStorage, TieredKVStorage
from kvspill.storage.summary import layout_summary_dtype, summarize_blocks
from kvspill.types import TIER_CPU, TIER_DISK, TIER_GPU

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, NUM_BLOCKS = 4, 2, 32, 4, 12
MIXED = (torch.float32, torch.float8_e4m3fn, torch.int8, torch.bfloat16)
SEQS = [(13, 1), (0, 9), (22, 5)]  # (num_computed_tokens, num_new_tokens): a decode, two chunks


def mixed_layout(dtypes: tuple[torch.dtype, ...] = MIXED) -> KVLayout:
    return KVLayout(len(dtypes), BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM, torch.int8, dtypes)


def test_a_layout_without_skipped_layers_is_the_uniform_pool():
    layout = KVLayout(3, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM, torch.bfloat16)
    assert not layout.mixed and layout.pool_dtype == torch.bfloat16
    assert layout.block_shape == (3, 2, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM)
    assert layout.block_bytes == 3 * 2 * BLOCK_SIZE * NUM_KV_HEADS * HEAD_DIM * 2
    pool = torch.zeros((5, *layout.block_shape), dtype=torch.bfloat16)
    assert layout.pool_layer(pool, 2).data_ptr() == pool[:, 2].data_ptr()
    assert layout_formats_of((), torch.int8) == (torch.int8, ())


def layout_formats_of(skip: tuple[int, ...], quantized: torch.dtype):
    return layer_formats(4, skip, quantized, torch.bfloat16)


def test_layer_formats_follow_the_skip_list():
    assert layout_formats_of((1, 3), torch.float8_e4m3fn) == (
        torch.float8_e4m3fn,
        (torch.float8_e4m3fn, torch.bfloat16, torch.float8_e4m3fn, torch.bfloat16),
    )
    assert layout_formats_of((0, 1, 2, 3), torch.int8) == (torch.bfloat16, ())  # every layer kept
    assert layout_formats_of((2,), torch.bfloat16) == (torch.bfloat16, ())  # auto: nothing to keep
    with pytest.raises(InvalidParameterError, match="has 4 layers"):
        config = EngineConfig(kv_cache_dtype="fp8", kv_cache_dtype_skip_layers=(4,))
        engine_layout(config, num_layers=4, num_kv_heads=2, head_dim=64, model_dtype=torch.bfloat16)


def test_each_layer_of_a_mixed_pool_is_its_own_typed_region():
    layout = mixed_layout()
    sizes = [2 * BLOCK_SIZE * NUM_KV_HEADS * HEAD_DIM * e for e in (4, 1, 1, 2)]
    sizes[2] += 2 * BLOCK_SIZE * NUM_KV_HEADS * 4  # int8 rows carry an fp32 scale
    assert layout.block_bytes == sum(sizes) and layout.pool_dtype == torch.uint8
    assert layout.bytes_per_token * BLOCK_SIZE == layout.block_bytes
    storage = KVStorage(layout, NUM_BLOCKS, torch.device("cpu"))
    assert storage.kv_cache.shape == (NUM_BLOCKS, layout.block_bytes)
    for layer, dtype in enumerate(MIXED):
        view = storage.layer(layer)
        assert view.dtype == dtype and view.shape == (NUM_BLOCKS, *layout.layer_shape(layer))
        assert (storage.rotation(layer) is not None) == (dtype == torch.int8)
    # writing one layer through its view changes its bytes and no other layer's
    storage.layer(1)[3] = torch.ones(layout.layer_shape(1)).to(torch.float8_e4m3fn)
    changed = (storage.kv_cache != 0).nonzero()
    start, end = layout.layer_offsets[1], layout.layer_offsets[2]
    assert changed[:, 0].eq(3).all() and changed[:, 1].ge(start).all() and changed[:, 1].lt(end).all()


def _random_pool(storage: KVStorage, g: torch.Generator) -> None:
    """Every layer's region of every block: random values of its format (int8 with real scales)."""
    for layer in range(storage.layout.num_layers):
        values = torch.randn((storage.num_blocks, 2, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM), generator=g)
        storage.layer(layer).copy_(quantize_kv(values, storage.layout.dtype_of(layer)))


def test_blocks_of_a_mixed_pool_move_through_cpu_and_disk_tiers_unchanged(tmp_path):
    layout = mixed_layout()
    storage = TieredKVStorage(
        layout, NUM_BLOCKS, torch.device("cpu"), num_cpu_blocks=5, num_disk_blocks=7, disk_dir=tmp_path
    )
    _random_pool(storage, torch.Generator().manual_seed(0))
    storage.write_blocks(TIER_CPU, [4, 0], storage.read_blocks(TIER_GPU, [2, 9]))
    storage.write_blocks(TIER_DISK, [6, 1, 2], storage.read_blocks(TIER_GPU, [9, 2, 5]))
    assert torch.equal(storage.read_blocks(TIER_DISK, [1, 6]), storage.read_blocks(TIER_GPU, [2, 9]))
    for layer in range(layout.num_layers):
        gpu = storage.layer(layer)
        for tier, ids, want in ((TIER_CPU, [0, 4], [9, 2]), (TIER_DISK, [2, 6, 1], [5, 9, 2])):
            out = torch.empty((len(ids), *layout.layer_shape(layer)), dtype=layout.dtype_of(layer))
            storage.gather_layer(tier, layer, np.array(ids), out)
            assert torch.equal(out.view(torch.uint8), gpu[want].view(torch.uint8)), (tier, layer)
    # a staging buffer takes any layer, each as dense blocks of its own format
    shape, dtype = layout.staging_shape(3)
    buf = torch.zeros(shape, dtype=dtype)
    for layer in range(layout.num_layers):
        staged = layout.staged_layer(buf, layer)
        assert staged.is_contiguous() and staged.dtype == layout.dtype_of(layer) and staged.shape[0] == 3
        storage.gather_layer(TIER_CPU, layer, np.array([4, 0, 4]), staged)
        assert torch.equal(staged.view(torch.uint8), storage.layer(layer)[[2, 9, 2]].view(torch.uint8))


def _step(layout: KVLayout):
    storage = KVStorage(layout, NUM_BLOCKS * 4, torch.device("cpu"))
    return storage, step_over_random_blocks(
        SEQS, NUM_BLOCKS * 4, BLOCK_SIZE, torch.Generator().manual_seed(1)
    )


def _attend(layout: KVLayout, layer: int, context: torch.Tensor, fused: bool):
    """One step of layer `layer` over `layout`'s pool: (o, the layer's stored KV)."""
    storage, inputs = _step(layout)
    basis = storage.rotation(layer)
    storage.layer(layer).copy_(
        quantize_kv(context if basis is None else rotate(context, basis), layout.dtype_of(layer))
    )
    g = torch.Generator().manual_seed(2)
    num_tokens = sum(n for _, n in SEQS)
    q, k, v = (
        torch.randn(num_tokens, h, HEAD_DIM, generator=g) for h in (NUM_HEADS, NUM_KV_HEADS, NUM_KV_HEADS)
    )
    angles = torch.rand((64, HEAD_DIM // 2), generator=g) * 6.28
    cos_sin = torch.cat((angles.cos(), angles.sin()), dim=-1)
    positions = torch.from_numpy(np.asarray(inputs.positions))
    attn = PagedAttention(storage, build_attention_metadata(inputs, storage.device, None), HEAD_DIM**-0.5)
    attn.host_kernel = False  # the torch decode path in both runs (the C++ one has its own tests)
    if fused:  # as on CUDA: the Triton kernels, RoPE handed to the backend
        attn.use_triton = attn.fuses_rope = True
        o = attn(layer, q, k, v, (positions, cos_sin))
    else:
        apply_rope_ref(q, k, positions, cos_sin)
        o = attn(layer, q, k, v)
    return o, storage.layer(layer).clone()


@pytest.mark.parametrize("fused", [False, True], ids=["torch", "triton"])
def test_attention_over_a_layer_of_a_mixed_pool_equals_a_uniform_pool_of_its_format(fused):
    if fused and torch.cuda.is_available():
        pytest.skip("runs the CUDA path on CPU tensors under Triton's interpreter (on a GPU: the GPU tests)")
    # fp8 has no numpy type for the interpreter, and the store kernels take the activations' dtype
    # or a quantized one (a skipped layer holds the model dtype): the Triton run mixes fp32 and int8
    dtypes = (torch.float32, torch.int8, torch.float32) if fused else MIXED
    layout = mixed_layout(dtypes)
    context = torch.randn(
        (NUM_BLOCKS * 4, 2, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM), generator=torch.Generator().manual_seed(0)
    )
    for layer, dtype in enumerate(dtypes):
        uniform = KVLayout(1, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM, dtype)
        o_mixed, kv_mixed = _attend(layout, layer, context, fused)
        o_uniform, kv_uniform = _attend(uniform, 0, context, fused)
        assert torch.equal(o_mixed, o_uniform), (layer, dtype)
        assert torch.equal(kv_mixed.view(torch.uint8), kv_uniform.view(torch.uint8)), (layer, dtype)


def test_summaries_of_a_mixed_pool_are_each_layers_own_in_the_kept_dtype():
    layout = mixed_layout((torch.float32, torch.float8_e4m3fn, torch.int8, torch.float32))
    storage = KVStorage(layout, NUM_BLOCKS, torch.device("cpu"))
    _random_pool(storage, torch.Generator().manual_seed(4))
    assert layout_summary_dtype(layout) == torch.float32
    got = summarize_blocks(layout, storage.kv_cache[2:5])  # [3, layers, 2, kv heads, head_dim]
    assert got.shape == (3, 4, 2, NUM_KV_HEADS, HEAD_DIM) and got.dtype == torch.float32
    for layer in range(layout.num_layers):
        uniform = KVLayout(1, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM, layout.dtype_of(layer))
        blocks = storage.layer(layer)[2:5].unsqueeze(1)  # as a one-layer uniform pool's blocks
        assert torch.equal(got[:, layer], summarize_blocks(uniform, blocks)[:, 0].float()), layer
