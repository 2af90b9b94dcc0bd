"""The cold part of a stream decode CUDA graph (`runner/stream_graphs.graph_stream_step`) against
the eager stream step, on the CPU: the graph's form (cold block ids padded to a capacity of whole
staging chunks, the real count and the step row in static buffers, reused step after step while
the sequence grows) gives the eager step's (o, lse). The padding points at a planted block whose
keys outscore every real one: a step that attended it would differ. Which steps qualify is
checked too; the capture and replay themselves need a GPU (the last test)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from step_inputs import decode_step_inputs

from kvspill.attention.cold.config import ColdAttentionConfig, ColdSeq
from kvspill.attention.cold.dispatch import ColdAttentionBackend
from kvspill.kernels.kv_quant import int8_planes
from kvspill.runner.stream_graphs import graph_stream_step, stream_eager_reason
from kvspill.storage.storage import KVLayout, TieredKVStorage
from kvspill.types import TIER_CPU, TIER_DISK

NUM_HEADS, SCALE, CHUNK_BLOCKS = 4, 16**-0.5, 8


def _backend(storage: TieredKVStorage, path: str = "stream", **kw: object) -> ColdAttentionBackend:
    config = ColdAttentionConfig(path=path, stream_chunk_blocks=CHUNK_BLOCKS, max_seq_blocks=64, **kw)
    return ColdAttentionBackend(storage, config)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8])
def test_the_graph_form_of_a_stream_step_equals_the_eager_step(dtype: torch.dtype):
    layout = KVLayout(num_layers=2, block_size=4, num_kv_heads=2, head_dim=16, dtype=dtype)
    g = torch.Generator().manual_seed(3)
    storage = TieredKVStorage(layout, 8, torch.device("cpu"), num_cpu_blocks=64)
    if dtype == torch.int8:  # int8 blocks carry their scales: fill both planes as the store would
        values, scales = int8_planes(storage.cpu_cache)
        values.copy_(torch.randint(-100, 100, values.shape, generator=g))
        scales.fill_(0.01)
    else:
        storage.cpu_cache.copy_(torch.randn(storage.cpu_cache.shape, generator=g))
    planted = 63
    if dtype == torch.float32:
        storage.cpu_cache[planted, :, 0] = 50.0  # keys that outscore everything: never in the sequence
    eager, graph = _backend(storage), _backend(storage)
    all_ids = torch.randperm(63, generator=g).numpy()  # the sequence's cold blocks, in logical order
    capacity = 3 * CHUNK_BLOCKS
    i64 = torch.zeros((3, capacity), dtype=torch.int64)
    i64[0] = planted  # padding: the planted block
    cold = graph_stream_step(graph, i64, capacity, SCALE)
    q_base = torch.randn(3, NUM_HEADS, 16, generator=g)
    for step, num_cold in enumerate((9, 9, 16, 17, 23)):  # chunks end at 8 and 16: both sides
        ids = all_ids[:num_cold].astype(np.int64)
        i64[0, :num_cold] = torch.from_numpy(ids)
        i64[2, :2] = torch.tensor([num_cold, 1])
        seq = ColdSeq(1, 1, np.full(num_cold, TIER_CPU), ids)
        eager_step = eager.for_step([seq], SCALE)
        assert eager_step is not None
        q = q_base + 0.3 * step * torch.randn(q_base.shape, generator=g)
        for layer in range(layout.num_layers):
            want_o, want_lse = eager_step.finish(eager_step.begin(layer, q))
            got_o, got_lse = cold.finish(cold.begin(layer, q))
            torch.testing.assert_close(got_lse, want_lse, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(got_o, want_o, rtol=1e-5, atol=1e-5)


def test_stream_eager_reason_names_what_keeps_a_step_off_the_graphs():
    layout = KVLayout(num_layers=2, block_size=4, num_kv_heads=2, head_dim=16, dtype=torch.float32)
    storage = TieredKVStorage(layout, 8, torch.device("cpu"), num_cpu_blocks=64)
    stream = _backend(storage)

    def seq(n: int, tiers: np.ndarray | None = None) -> ColdSeq:
        return ColdSeq(0, 1, np.full(n, TIER_CPU) if tiers is None else tiers, np.arange(n))

    assert stream_eager_reason(decode_step_inputs([seq(8)]), stream) is None
    assert "prefill" in (stream_eager_reason(decode_step_inputs([seq(8)], num_decodes=1), stream) or "")
    assert "several" in (stream_eager_reason(decode_step_inputs([seq(8), seq(9)]), stream) or "")
    disk = np.array([TIER_CPU] * 7 + [TIER_DISK])
    assert "disk" in (stream_eager_reason(decode_step_inputs([seq(8, disk)]), stream) or "")
    # split: a step whose cold part is too small to hand over streams all of it (graph), a larger
    # one gives the CPU a share (eager)
    split = _backend(storage, "split", cpu_fraction=0.5, min_split_layer_bytes=16 * layout.block_bytes // 2)
    assert stream_eager_reason(decode_step_inputs([seq(8)]), split) is None
    assert "split" in (stream_eager_reason(decode_step_inputs([seq(40)]), split) or "")
    # "auto" with stream graphs: a step that could replay one splits only from its own, higher
    # threshold; the same step run eagerly (say, beside a prefill chunk) splits from the lower one
    auto = _backend(
        storage,
        "split",
        cpu_fraction=0.5,
        min_split_layer_bytes=16 * layout.block_bytes // 2,
        min_split_layer_bytes_graphed=48 * layout.block_bytes // 2,
    )
    assert stream_eager_reason(decode_step_inputs([seq(40)]), auto) is None
    assert auto.decode_cpu_fraction([seq(40)]) == 0.5
    assert "split" in (stream_eager_reason(decode_step_inputs([seq(48)]), auto) or "")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8", "fp8+skip"])
def test_stream_graph_replays_give_the_eager_tokens(smollm2_geometry_dir, kv_cache_dtype: str):
    """SmolLM2's geometry at 2K with 256 tokens on the gpu tier: ~110 cold blocks streamed each
    step, 40 decode steps from one graph, against the same engine without stream graphs."""
    import os

    from kvspill.eval.runner import hot_kv_kwargs
    from kvspill.llm import LLM
    from kvspill.sampling_params import SamplingParams

    kw = dict(
        device="cuda", dtype="float32" if kv_cache_dtype == "auto" else "bfloat16", max_model_len=2048,
        cold_attention="stream", kv_cache_dtype=kv_cache_dtype.removesuffix("+skip"), **hot_kv_kwargs(256, 2048),
        # a mixed pool: two of the 4 layers kept at bf16 (storage/layout.py), staged per layer through byte buffers
        kv_cache_dtype_skip_layers=[0, 2] if kv_cache_dtype.endswith("+skip") else [],
    )  # fmt: skip
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 256, (1900,), generator=g).tolist()
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    os.environ["KVSPILL_STREAM_CUDA_GRAPHS"] = "0"
    try:
        eager = LLM(str(smollm2_geometry_dir), **kw)
        assert eager.engine.runner.stream_graphs is None
        want = eager.generate([prompt], params)[0].token_ids
        eager.engine.close()
    finally:
        del os.environ["KVSPILL_STREAM_CUDA_GRAPHS"]
    llm = LLM(str(smollm2_geometry_dir), **kw)
    got = llm.generate([prompt], params)[0].token_ids
    assert got == want
    graphs = llm.engine.runner.stream_graphs
    assert graphs is not None and graphs.num_replays >= 38 and graphs.num_captures == 1
