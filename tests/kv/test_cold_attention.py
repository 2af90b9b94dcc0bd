"""Attention across tiers equals all-gpu attention: every cold path, decode and prefill rows.

One step mixes decodes and prefill chunks of several sequences. The reference runs with every
block in the gpu tier; then random full, non-sink blocks before each sequence's new tokens move
to the cpu and disk tiers (with the transfer engine), the gpu blocks they leave are filled with
NaN (a kernel that still read one would show it), and the step runs again with the compacted
tables and the cold partials. fp32 throughout.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

from kvspill.attention.cold import dispatch as cold_attention
from kvspill.attention.cold.config import ColdAttentionConfig, ColdSeq
from kvspill.attention.cold.dispatch import ColdAttentionBackend
from kvspill.attention.cold.merge import attend_unmasked_ref, fold_queries, merge_partials, unfold_outputs
from kvspill.kernels.attention_common import dense_attention_ref
from kvspill.runner.attention import PagedAttention, build_attention_metadata
from kvspill.runner.inputs import RunnerRequestState, apply_block_moves, build_step_inputs
from kvspill.sampling.sampler import SamplingState
from kvspill.sampling_params import SamplingParams
from kvspill.storage.storage import KVLayout, TieredKVStorage
from kvspill.storage.transfer import KVTransferEngine
from kvspill.types import TIER_CPU, TIER_DISK, TIER_GPU, BlockMove, ScheduledBatch, TransferPlan

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
LAYOUT = KVLayout(num_layers=2, block_size=4, num_kv_heads=2, head_dim=16, dtype=torch.float32)
NUM_HEADS = 4
SCALE = 16**-0.5
NUM_GPU_BLOCKS = 160
# (num_computed_tokens, num_new_tokens): decodes and prefill chunks; seq 2 ends up 90% cold.
SEQS = [(37, 1), (9, 1), (120, 1), (23, 6), (0, 10), (40, 5), (61, 16)]
LONG_SEQ = 2


def _states(g: torch.Generator) -> dict[str, RunnerRequestState]:
    perm = torch.randperm(NUM_GPU_BLOCKS, generator=g).tolist()
    states = {}
    for i, (c, n) in enumerate(SEQS):
        num_blocks = -(-(c + n) // LAYOUT.block_size)
        ids, perm = perm[:num_blocks], perm[num_blocks:]
        sampling = SamplingState(params=SamplingParams(), prompt_token_ids=[])
        states[f"r{i}"] = RunnerRequestState(f"r{i}", list(range(c + n)), ids, c, sampling)
    return states


def _cold_moves(states: dict[str, RunnerRequestState], g: torch.Generator) -> list[BlockMove]:
    """Random full non-sink blocks before each sequence's new tokens, to random cpu/disk ids."""
    free = {
        TIER_CPU: torch.randperm(100, generator=g).tolist(),
        TIER_DISK: torch.randperm(100, generator=g).tolist(),
    }
    moves = []
    for i, st in enumerate(states.values()):
        eligible = list(range(1, st.num_computed_tokens // LAYOUT.block_size))
        if i == LONG_SEQ:
            chosen = eligible[: int(0.9 * len(st.block_ids)) + 1]
            assert len(chosen) >= 0.9 * len(st.block_ids)
        else:
            chosen = [b for b in eligible if torch.rand((), generator=g) < 0.6]
        for idx in chosen:
            tier = TIER_CPU if torch.rand((), generator=g) < 0.5 else TIER_DISK
            moves.append(BlockMove(st.req_id, idx, TIER_GPU, st.block_ids[idx], tier, free[tier].pop()))
    # Some consecutive runs too, as the scheduler's free lists hand out.
    return moves


def _run_step(storage, states, batch, qkv, backend=None):
    inputs = build_step_inputs(batch, states, LAYOUT.block_size)
    cold = backend.for_step(inputs.cold_seqs, SCALE) if backend is not None else None
    assert (cold is None) == (not inputs.cold_seqs)
    attention = PagedAttention(storage, build_attention_metadata(inputs, storage.device, cold), SCALE)
    return [attention(layer, *qkv[layer]) for layer in range(LAYOUT.num_layers)], inputs


CONFIGS = {
    "cpu": ColdAttentionConfig(path="cpu"),
    "cpu-workers-small-chunks": ColdAttentionConfig(path="cpu", cpu_workers=2, cpu_chunk_blocks=3),
    "cpu-no-compiler": ColdAttentionConfig(path="cpu", cpu_chunk_blocks=3),  # gather + torch's kernel
    "cpu-one-thread": ColdAttentionConfig(path="cpu", cpu_threads=1),
    "stream": ColdAttentionConfig(path="stream"),
    "stream-small-chunks": ColdAttentionConfig(path="stream", stream_chunk_blocks=5, max_rows_per_query=4),
    "split": ColdAttentionConfig(path="split", cpu_fraction=0.4, stream_chunk_blocks=4),
    "split-mostly-cpu": ColdAttentionConfig(path="split", cpu_fraction=0.9, stream_chunk_blocks=4),
    "split-mostly-stream": ColdAttentionConfig(path="split", cpu_fraction=0.1, cpu_workers=1),
    "split-bandwidths": ColdAttentionConfig(
        path="split", cpu_attn_gbs=30.0, h2d_gbs=50.0, stream_chunk_blocks=7
    ),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_tiered_attention_matches_all_gpu(tmp_path, monkeypatch, name):
    if name == "cpu-no-compiler":
        monkeypatch.setattr(cold_attention, "load_kernel", lambda: None)
    g = torch.Generator().manual_seed(7)
    storage = TieredKVStorage(
        LAYOUT, NUM_GPU_BLOCKS, DEVICE, num_cpu_blocks=100, num_disk_blocks=100, disk_dir=tmp_path
    )
    storage.kv_cache.copy_(torch.randn(storage.kv_cache.shape, generator=g))
    states = _states(g)
    counts = {r: n for r, (_, n) in zip(states, SEQS, strict=True)}
    batch = ScheduledBatch([], [], counts, sum(counts.values()), set())
    num_tokens = sum(counts.values())
    qkv = [
        tuple(torch.randn(num_tokens, h, 16, generator=g).to(DEVICE) for h in (NUM_HEADS, 2, 2))
        for _ in range(LAYOUT.num_layers)
    ]
    want, ref_inputs = _run_step(storage, states, batch, qkv)

    moves = _cold_moves(states, g)
    transfers = KVTransferEngine(storage)
    transfers.execute(TransferPlan(moves))
    apply_block_moves(states, moves)
    storage.kv_cache[[m.src_block_id for m in moves]] = float("nan")
    slots = torch.from_numpy(ref_inputs.slot_mapping)  # the new tokens: the tiered run must store them again
    storage.kv_cache[slots // LAYOUT.block_size, :, :, slots % LAYOUT.block_size] = float("nan")
    assert states[f"r{LONG_SEQ}"].num_cold_blocks >= 0.9 * len(states[f"r{LONG_SEQ}"].block_ids)

    backend = ColdAttentionBackend(storage, CONFIGS[name], wait_host=transfers.wait_host)
    got, inputs = _run_step(storage, states, batch, qkv, backend)
    assert inputs.num_decodes == 3 and len(inputs.cold_seqs) >= 5
    for layer in range(LAYOUT.num_layers):
        torch.testing.assert_close(got[layer], want[layer], rtol=1e-5, atol=1e-5)
    stats = backend.counters()
    assert stats.num_steps == 1
    path = backend.path
    assert (stats.cpu_bytes > 0) == (path in ("cpu", "split"))
    # on CUDA the prefill rows over cold KV take the stream path whatever the choice (ColdStep)
    assert (stats.stream_bytes > 0) == (path in ("stream", "split") or DEVICE.type == "cuda")
    if name == "split-bandwidths":
        assert backend.cpu_fraction == pytest.approx(30 / 80)
    backend.close()


def test_steps_without_cold_blocks_build_no_cold_work():
    storage = TieredKVStorage(LAYOUT, 8, torch.device("cpu"), num_cpu_blocks=4)
    backend = ColdAttentionBackend(storage)
    assert backend.path == "cpu"  # "auto" on a host-resident pool
    assert backend.for_step([], SCALE) is None and backend.stats.num_steps == 0


def test_cold_block_after_the_first_new_token_is_refused():
    sampling = SamplingState(params=SamplingParams(), prompt_token_ids=[])
    st = RunnerRequestState(
        "a", list(range(12)), [0, 1, 2], 6, sampling, block_tiers=[TIER_GPU, TIER_CPU, TIER_GPU]
    )
    batch = ScheduledBatch([], [], {"a": 6}, 6, set())
    with pytest.raises(RuntimeError, match="only full blocks before it may be cold"):
        build_step_inputs(batch, {"a": st}, 4)


def test_moves_of_a_table_sent_after_the_moves_are_accepted():
    sampling = SamplingState(params=SamplingParams(), prompt_token_ids=[])
    st = RunnerRequestState(
        "a", list(range(12)), [0, 7, 2], 12, sampling, block_tiers=[TIER_GPU, TIER_DISK, TIER_GPU]
    )
    moves = [BlockMove("a", 1, TIER_GPU, 1, TIER_CPU, 3), BlockMove("a", 1, TIER_CPU, 3, TIER_DISK, 7)]
    apply_block_moves({"a": st}, moves)  # already shows disk 7: nothing to change
    assert st.block_tiers == [TIER_GPU, TIER_DISK, TIER_GPU] and st.num_cold_blocks == 1
    apply_block_moves({"a": st}, [BlockMove("a", 1, TIER_DISK, 7, TIER_GPU, 5)])
    assert st.block_ids == [0, 5, 2] and st.num_cold_blocks == 0
    with pytest.raises(RuntimeError, match="does not match"):
        apply_block_moves({"a": st}, [BlockMove("a", 0, TIER_CPU, 1, TIER_GPU, 4)])


def test_lse_merge_of_two_partials_equals_attention_over_the_union():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(6, 8, 32, generator=g)
    k, v = torch.randn(2, 50, 2, 32, generator=g)
    o, lse = attend_unmasked_ref(q, k, v, 0.3)
    # Independent oracle: plain softmax, every row sees every key.
    kk, vv = k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1)  # [keys, heads, dim]
    scores = torch.einsum("thd,khd->thk", q, kk) * 0.3
    torch.testing.assert_close(o, torch.einsum("thk,khd->thd", scores.softmax(-1), vv))
    torch.testing.assert_close(lse, scores.logsumexp(-1))
    part = torch.randperm(50, generator=g)
    a, b = part[:17], part[17:]
    o_a, lse_a = attend_unmasked_ref(q, k[a], v[a], 0.3)
    o_b, lse_b = attend_unmasked_ref(q, k[b], v[b], 0.3)
    o_m, lse_m = merge_partials(o_a, lse_a, o_b, lse_b)
    torch.testing.assert_close(o_m, o, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse_m, lse, rtol=1e-5, atol=1e-6)
    # One query row folded alone is plain decode attention.
    o_d, lse_d = dense_attention_ref(q[:1], k, v, 0.3)
    torch.testing.assert_close(o_d, o[:1])


def test_fold_unfold_round_trip():
    q = torch.randn(3, 5, 8, 16)
    folded = fold_queries(q, num_kv_heads=2)
    assert folded.shape == (3, 2 * 5 * 4, 16)
    assert torch.equal(folded[1, 4 * 1 + 2], q[1, 1, 2])  # kv head 0, token 1, group member 2
    o, lse = unfold_outputs(folded, folded[..., 0], 5, num_kv_heads=2)
    assert torch.equal(o, q.reshape(15, 8, 16)) and torch.equal(lse, q.reshape(15, 8, 16)[..., 0])


@pytest.mark.parametrize("path", ["cpu", "stream", "sparse"])
def test_a_step_is_freed_when_its_last_reference_goes(path):
    """No reference cycle through a step (a bound method of it kept by its paths was one): its
    device tensors (chunk tables, rows) go when the attention drops it, not at Python's next
    cyclic garbage collection, which left a 512K prefill's steps alive until the GPU ran out."""
    storage = TieredKVStorage(LAYOUT, NUM_GPU_BLOCKS, torch.device("cpu"), num_cpu_blocks=16)
    backend = ColdAttentionBackend(storage, ColdAttentionConfig(path=path))
    seqs = [
        ColdSeq(0, 3, np.full(4, TIER_CPU), np.arange(4)),  # a prefill chunk
        ColdSeq(3, 1, np.full(2, TIER_CPU), np.arange(4, 6), np.arange(2), "r"),  # a decode row
    ]
    gc.disable()
    try:
        step = backend.for_step(seqs, SCALE)
        assert step is not None
        step.finish(step.begin(0, torch.randn(4, NUM_HEADS, 16)))
        ref = weakref.ref(step)
        del step
        assert ref() is None
    finally:
        gc.enable()


def _split_step(min_split_layer_bytes: int, num_cold: int) -> cold_attention.ColdStep:
    storage = TieredKVStorage(LAYOUT, 4, DEVICE, num_cpu_blocks=num_cold)
    config = ColdAttentionConfig(path="split", cpu_fraction=0.5, min_split_layer_bytes=min_split_layer_bytes)
    backend = ColdAttentionBackend(storage, config)
    decode = ColdSeq(0, 1, np.full(num_cold, TIER_CPU), np.arange(num_cold, dtype=np.int64))
    step = backend.for_step([decode], SCALE)
    assert step is not None
    return step


def test_split_streams_a_step_whose_cold_kv_is_under_its_least_share() -> None:
    """ "auto" resolved to split on a GPU hands the CPU a share only when the step's decode rows
    have at least `min_split_layer_bytes` of cold KV per layer (plan/cold_rates.py says why)."""
    layer_bytes = 40 * LAYOUT.block_bytes // LAYOUT.num_layers  # 40 cold blocks, one layer
    under = _split_step(layer_bytes + 1, 40)
    assert not under.cpu_parts and under.stream_parts
    at_least = _split_step(layer_bytes, 40)
    assert at_least.cpu_parts and at_least.stream_parts
    assert sum(p.num_blocks for p in at_least.cpu_parts) == 20
    always = _split_step(0, 2)  # an explicit --cold-attention split: every step
    assert always.cpu_parts and always.stream_parts


def test_a_step_that_could_replay_a_stream_graph_splits_from_its_own_least_share() -> None:
    """`decode_cpu_fraction(graphable=True)` (asked by runner/stream_graphs.py) holds back the CPU's
    share until `min_split_layer_bytes_graphed`: a graphed stream step is faster than an eager one."""
    num_cold = 40
    storage = TieredKVStorage(LAYOUT, 4, DEVICE, num_cpu_blocks=num_cold)
    layer_bytes = num_cold * LAYOUT.block_bytes // LAYOUT.num_layers
    seqs = [ColdSeq(0, 1, np.full(num_cold, TIER_CPU), np.arange(num_cold, dtype=np.int64))]
    for graphed_least, graphed_share in ((layer_bytes + 1, 0.0), (layer_bytes, 0.5)):
        config = ColdAttentionConfig(
            path="split",
            cpu_fraction=0.5,
            min_split_layer_bytes=layer_bytes // 2,
            min_split_layer_bytes_graphed=graphed_least,
        )
        backend = ColdAttentionBackend(storage, config)
        assert backend.decode_cpu_fraction(seqs) == 0.5  # an eager step: the lower threshold
        assert backend.decode_cpu_fraction(seqs, graphable=True) == graphed_share


def test_split_sizes_each_steps_cpu_share_by_the_rates_and_the_fixed_time() -> None:
    """With measured rates and the CPU part's fixed time per layer (calibration), a decode step's
    CPU share is `ColdAttentionConfig.cpu_share_for` its cold bytes per layer."""
    num_cold = 40
    storage = TieredKVStorage(LAYOUT, 4, DEVICE, num_cpu_blocks=num_cold)
    layer_bytes = num_cold * LAYOUT.block_bytes // LAYOUT.num_layers
    # equal rates (an even share without a fixed time); the fixed time is half of streaming it all
    config = ColdAttentionConfig(path="split", cpu_attn_gbs=1.0, h2d_gbs=1.0, cpu_layer_s=layer_bytes / 2e9)
    share = config.cpu_share_for(layer_bytes)
    assert share == pytest.approx(0.25)
    backend = ColdAttentionBackend(storage, config)
    step = backend.for_step([ColdSeq(0, 1, np.full(num_cold, TIER_CPU), np.arange(num_cold))], SCALE)
    assert step is not None
    assert sum(p.num_blocks for p in step.cpu_parts) == round(num_cold * share) == 10
