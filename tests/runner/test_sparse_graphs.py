"""The cold part of a sparse decode CUDA graph (`runner/sparse_graphs.graph_cold_step`) against
the eager sparse step, on the CPU: the graph's form (a block list padded to a fixed capacity, the
real count, the step row and the cache group in static buffers, reused step after step while
the sequence grows) gives the eager step's (o, lse) and leaves the sparse block cache in the
same state. The padding points at a planted block that outscores every real one: a selection
that read it would differ. The capture and replay themselves need a GPU (benchmarks)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from step_inputs import decode_step_inputs

from kvspill.attention.cold.config import ColdAttentionConfig, ColdSeq
from kvspill.attention.cold.dispatch import ColdAttentionBackend
from kvspill.runner.sparse_graphs import eager_reason, graph_cold_step
from kvspill.storage.storage import KVLayout, TieredKVStorage
from kvspill.types import TIER_CPU, TIER_DISK

LAYOUT = KVLayout(num_layers=2, block_size=4, num_kv_heads=2, head_dim=16, dtype=torch.float32)
NUM_HEADS, SCALE, CAPACITY, BUDGET_BLOCKS = 4, 16**-0.5, 48, 5


def _backend(storage: TieredKVStorage, prompt_window: int = 0) -> ColdAttentionBackend:
    config = ColdAttentionConfig(
        path="sparse",
        sparse_budget_tokens=BUDGET_BLOCKS * LAYOUT.block_size,
        sparse_cache_seqs=1,
        max_seq_blocks=64,
        sparse_prompt_window=prompt_window,
        sparse_prompt_share=0.4,  # 2 of the 5 blocks
    )
    return ColdAttentionBackend(storage, config)


def test_the_graph_form_of_a_sparse_step_equals_the_eager_step():
    g = torch.Generator().manual_seed(5)
    storage = TieredKVStorage(LAYOUT, 8, torch.device("cpu"), num_cpu_blocks=64)
    storage.cpu_cache.copy_(torch.randn(storage.cpu_cache.shape, generator=g))
    planted = 63
    storage.cpu_cache[planted, :, 0] = 50.0  # keys that outscore everything: never in the sequence
    eager, graph = _backend(storage), _backend(storage)
    graph.summaries.ensure(TIER_CPU, np.array([planted]))  # its summary is there to be (mis)read
    all_ids = torch.randperm(63, generator=g).numpy()  # the sequence's cold blocks, in logical order

    i64 = torch.zeros((3, CAPACITY), dtype=torch.int64)
    i64[0] = planted  # padding: the planted block
    tiers = torch.full((CAPACITY,), TIER_CPU, dtype=torch.int64)
    (group,) = graph.sparse_cache.assign(["r"])
    assert group == 0
    cold = graph_cold_step(graph, i64, tiers, torch.arange(CAPACITY), CAPACITY, group, SCALE)
    q_base = torch.randn(3, NUM_HEADS, 16, generator=g)
    for step, num_cold in enumerate((20, 20, 21, 25)):  # the sequence grows; the buffers stay
        ids = all_ids[:num_cold].astype(np.int64)
        graph.summaries.ensure(TIER_CPU, ids)  # what SparseDecodeGraphs.run does before a replay
        i64[0, :num_cold] = torch.from_numpy(ids)
        i64[1, :num_cold] = torch.arange(num_cold)
        i64[2, :2] = torch.tensor([num_cold, 1])
        seq = ColdSeq(1, 1, np.full(num_cold, TIER_CPU), ids, np.arange(num_cold), "r")
        eager_step = eager.for_step([seq], SCALE)
        assert eager_step is not None
        q = q_base + 0.3 * step * torch.randn(q_base.shape, generator=g)  # queries drift: some misses
        for layer in range(LAYOUT.num_layers):
            want = eager_step.finish(eager_step.begin(layer, q))
            got = cold.finish(cold.begin(layer, q))
            torch.testing.assert_close(got, want, rtol=0, atol=0)
        for name in ("slot_of", "slot_block", "copied_blocks"):
            assert torch.equal(getattr(graph.sparse_cache, name), getattr(eager.sparse_cache, name)), name
    assert 0 < int(graph.sparse_cache.copied_blocks) < 4 * LAYOUT.num_layers * BUDGET_BLOCKS  # hits too


def test_eager_reason_names_what_keeps_a_step_off_the_graphs():
    def seq(n: int, tiers: np.ndarray | None = None, req: str | None = "a") -> ColdSeq:
        return ColdSeq(
            0, 1, np.full(n, TIER_CPU) if tiers is None else tiers, np.arange(n), np.arange(n), req
        )

    assert eager_reason(decode_step_inputs([seq(8)]), 8) is None
    assert "prefill" in (eager_reason(decode_step_inputs([seq(8)], num_decodes=1), 8) or "")
    assert "several" in (eager_reason(decode_step_inputs([seq(8), seq(9, req="b")]), 8) or "")
    assert "disk" in (
        eager_reason(decode_step_inputs([seq(8, np.array([TIER_CPU] * 7 + [TIER_DISK]))]), 8) or ""
    )
    assert "fewer cold tokens" in (eager_reason(decode_step_inputs([seq(7)]), 8) or "")
    assert "request id" in (eager_reason(decode_step_inputs([seq(8, req=None)]), 8) or "")


def test_the_graph_form_keeps_the_prompt_anchors_like_the_eager_step():
    """With prompt anchors (`attention/sparse/anchor.py`): the graph's static anchor buffer, filled as
    `SparseDecodeGraphs.prepare` fills it, gives the eager step's (o, lse); without anchors the
    result differs (the anchors change the choice)."""
    from kvspill.attention.sparse.anchor import build_capture

    g = torch.Generator().manual_seed(7)
    storage = TieredKVStorage(LAYOUT, 8, torch.device("cpu"), num_cpu_blocks=64)
    storage.cpu_cache.copy_(torch.randn(storage.cpu_cache.shape, generator=g))
    eager, graph, plain = _backend(storage, 6), _backend(storage, 6), _backend(storage)
    prompt_q = torch.randn(LAYOUT.num_layers, 6, NUM_HEADS, 16, generator=g)
    for backend in (eager, graph):  # the prompt's last 6 queries, as the prefill's attention keeps them
        assert backend.anchors is not None
        capture = build_capture(backend.anchors, [("r", 100, 94, 6, 0)], torch.device("cpu"))
        assert capture is not None
        for layer in range(LAYOUT.num_layers):
            capture.store(layer, prompt_q[layer])
    ids = torch.randperm(60, generator=g).numpy()[:30].astype(np.int64)
    for backend in (eager, graph, plain):
        backend.summaries.ensure(TIER_CPU, ids)
    i64 = torch.zeros((3, CAPACITY), dtype=torch.int64)
    i64[0, :30], i64[1, :30], i64[2, :2] = torch.from_numpy(ids), torch.arange(30), torch.tensor([30, 1])
    anchor = torch.zeros((LAYOUT.num_layers, CAPACITY), dtype=torch.bool)
    (group,) = graph.sparse_cache.assign(["r"])
    cold = graph_cold_step(
        graph, i64, torch.full((CAPACITY,), TIER_CPU), torch.arange(CAPACITY), CAPACITY, group, SCALE, anchor
    )
    masks = graph.anchors.masks(
        "r", (30, 29), BUDGET_BLOCKS, lambda layer, lo, hi: graph.summaries.layer(TIER_CPU, layer)[ids[lo:hi]]
    )
    assert masks is not None and masks.sum(dim=1).tolist() == [2, 2]
    anchor[:, :30] = masks
    seq = ColdSeq(1, 1, np.full(30, TIER_CPU), ids, np.arange(30), "r")
    eager_step, plain_step = eager.for_step([seq], SCALE), plain.for_step([seq], SCALE)
    assert eager_step is not None and plain_step is not None
    q = torch.randn(3, NUM_HEADS, 16, generator=g)
    differs = False
    for layer in range(LAYOUT.num_layers):
        want = eager_step.finish(eager_step.begin(layer, q))
        torch.testing.assert_close(cold.finish(cold.begin(layer, q)), want, rtol=0, atol=0)
        differs |= not torch.equal(plain_step.finish(plain_step.begin(layer, q))[0], want[0])
    assert differs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("prompt_window", [0, 32])
def test_sparse_graph_replays_give_the_eager_tokens_with_much_padding(smollm2_geometry_dir, prompt_window):
    """SmolLM2's geometry at 2K: ~90 cold blocks padded to a 1,024-block capacity, a 16-block
    budget, 40 decode steps replayed from one graph. The graph must keep the cold step's own
    tensors alive: freed after the capture, a replay read reused memory as indices (a
    device-side assert, H200 2026-11-27)."""
    from kvspill.eval.runner import hot_kv_kwargs
    from kvspill.llm import LLM
    from kvspill.sampling_params import SamplingParams

    kw = dict(
        device="cuda", dtype="float32", max_model_len=2048, cold_attention="sparse",
        sparse_budget_tokens=256, sparse_prompt_window=prompt_window, **hot_kv_kwargs(256, 2048),
    )  # fmt: skip
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 256, (2000,), generator=g).tolist() for _ in range(2)]
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    want = [
        o.token_ids
        for o in LLM(str(smollm2_geometry_dir), enforce_eager=True, **kw).generate(prompts, params)
    ]
    llm = LLM(str(smollm2_geometry_dir), **kw)
    got = [o.token_ids for o in llm.generate(prompts, params)]
    assert got == want
    graphs = llm.engine.runner.sparse_graphs
    assert graphs is not None and graphs.num_replays > 40


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("enforce_eager", [False, True])
def test_selection_beside_the_gpu_tiers_attention_gives_the_same_tokens(
    smollm2_geometry_dir, monkeypatch, enforce_eager
):
    """`ColdStep.begin` selects and fetches a layer's cold blocks on the backend's sparse stream
    while the compute stream attends the gpu tier (a parallel branch of the graph);
    KVSPILL_SPARSE_OVERLAP=0 runs both on the compute stream; KVSPILL_SPARSE_HOT_AFTER moves where
    the gpu tier's attention starts. Same greedy tokens every way."""
    from kvspill.eval.runner import hot_kv_kwargs
    from kvspill.llm import LLM
    from kvspill.sampling_params import SamplingParams

    kw = dict(
        device="cuda", dtype="float32", max_model_len=2048, cold_attention="sparse",
        sparse_budget_tokens=256, enforce_eager=enforce_eager, **hot_kv_kwargs(256, 2048),
    )  # fmt: skip
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 256, (1900,), generator=g).tolist() for _ in range(2)]
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    tokens = {}
    # where the gpu tier's attention starts beside the side stream: KVSPILL_SPARSE_HOT_AFTER
    for overlap, hot_after in (("0", "select"), ("1", "select"), ("1", "keys"), ("1", "none")):
        monkeypatch.setenv("KVSPILL_SPARSE_OVERLAP", overlap)
        monkeypatch.setenv("KVSPILL_SPARSE_HOT_AFTER", hot_after)
        llm = LLM(str(smollm2_geometry_dir), **kw)
        backend = llm.engine.runner.cold
        assert (backend.sparse_stream is not None) == (overlap == "1")
        tokens[overlap, hot_after] = [o.token_ids for o in llm.generate(prompts, params)]
        del llm
    assert all(t == tokens["0", "select"] for t in tokens.values())


def test_where_the_gpu_tiers_attention_starts_is_read_and_checked(monkeypatch):
    from kvspill.env import sparse_hot_after

    monkeypatch.delenv("KVSPILL_SPARSE_HOT_AFTER", raising=False)
    assert sparse_hot_after() == "select"
    monkeypatch.setenv("KVSPILL_SPARSE_HOT_AFTER", "keys")
    assert sparse_hot_after() == "keys"
    monkeypatch.setenv("KVSPILL_SPARSE_HOT_AFTER", "later")
    with pytest.raises(ValueError, match="keys, select or none"):
        sparse_hot_after()
