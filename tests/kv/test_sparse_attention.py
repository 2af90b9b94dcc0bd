"""Sparse cold attention (`--cold-attention sparse`): summaries, selection, and the backend.

- A budget of at least every cold length selects every block: the step equals all-gpu
  attention (decode rows through the sparse path, prefill rows through the exact one).
- Summaries written at spill time (and carried along cpu->disk) equal the min/max of the keys.
- Quest scores equal their definition and bound every key's q . k from above.
- Planted blocks are chosen by id; ties go to the lower block index; the choice is repeatable.
- A small budget attends exactly the chosen blocks (checked against dense attention over them).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvspill.attention.cold.config import ColdAttentionConfig, ColdSeq
from kvspill.attention.cold.dispatch import ColdAttentionBackend
from kvspill.attention.cold.merge import attend_unmasked_ref
from kvspill.attention.sparse.select import block_scores, block_scores_ref, quest_bounds, select_blocks
from kvspill.kernels.kv_quant import dequantize_kv, quantize_kv
from kvspill.runner.inputs import apply_block_moves
from kvspill.storage.storage import TieredKVStorage
from kvspill.storage.summary import BlockSummaries, bytes_per_block, summarize_keys
from kvspill.storage.transfer import KVTransferEngine
from kvspill.types import TIER_CPU, TIER_DISK, TIER_GPU, BlockMove, ScheduledBatch, TransferPlan

from .test_cold_attention import (
    LAYOUT,
    NUM_GPU_BLOCKS,
    NUM_HEADS,
    SCALE,
    SEQS,
    _cold_moves,
    _run_step,
    _states,
)

CPU = torch.device("cpu")
ON_CUDA = pytest.param(
    torch.device("cuda"),
    marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")],
)


def _tiered_step(tmp_path, config: ColdAttentionConfig, g: torch.Generator, device: torch.device = CPU):
    """Reference (all gpu) and tiered outputs of one mixed step, with summaries kept at spill time."""
    storage = TieredKVStorage(
        LAYOUT, NUM_GPU_BLOCKS, device, num_cpu_blocks=100, num_disk_blocks=100, disk_dir=tmp_path
    )
    storage.kv_cache.copy_(torch.randn(storage.kv_cache.shape, generator=g))
    states = _states(g)
    counts = {r: n for r, (_, n) in zip(states, SEQS, strict=True)}
    batch = ScheduledBatch([], [], counts, sum(counts.values()), set())
    num_tokens = sum(counts.values())
    qkv = [
        tuple(torch.randn(num_tokens, h, 16, generator=g).to(device) for h in (NUM_HEADS, 2, 2))
        for _ in range(LAYOUT.num_layers)
    ]
    want, ref_inputs = _run_step(storage, states, batch, qkv)
    backend = ColdAttentionBackend(storage, config)
    transfers = KVTransferEngine(storage, summaries=backend.summaries)
    moves = _cold_moves(states, g)
    transfers.execute(TransferPlan(moves))
    apply_block_moves(states, moves)
    storage.kv_cache[[m.src_block_id for m in moves]] = float("nan")
    slots = torch.from_numpy(ref_inputs.slot_mapping)
    storage.kv_cache[slots // LAYOUT.block_size, :, :, slots % LAYOUT.block_size] = float("nan")
    got, inputs = _run_step(storage, states, batch, qkv, backend)
    return want, got, inputs, backend, storage


@pytest.mark.parametrize("device", [CPU, ON_CUDA])
def test_a_budget_above_every_cold_length_equals_exact_attention(tmp_path, device):
    """On CUDA the pinned cpu-tier blocks go through the zero-copy gather, disk ones the host."""
    g = torch.Generator().manual_seed(7)
    config = ColdAttentionConfig(path="sparse", sparse_budget_tokens=4096)
    want, got, inputs, backend, _ = _tiered_step(tmp_path, config, g, device)
    assert inputs.num_decodes == 3 and len(inputs.cold_seqs) >= 5
    for layer in range(LAYOUT.num_layers):
        torch.testing.assert_close(got[layer], want[layer], rtol=1e-5, atol=1e-5)
    stats = backend.counters()
    num_decode_cold = sum(len(s.block_ids) for s in inputs.cold_seqs if s.num_tokens == 1)
    assert stats.sparse_cold_blocks == stats.sparse_selected_blocks == num_decode_cold * LAYOUT.num_layers
    assert stats.sparse_bytes == stats.sparse_selected_blocks * LAYOUT.block_bytes // LAYOUT.num_layers
    assert (stats.cpu_bytes > 0) == (device.type == "cpu")  # prefill rows: the exact path of "auto"
    assert backend.summaries is not None and backend.summaries.num_late == 0
    assert stats.summary_bytes == 200 * bytes_per_block(LAYOUT)


def test_a_small_budget_attends_exactly_the_chosen_blocks(tmp_path):
    """Decode rows: the cold partial equals dense attention over the blocks `select_blocks` picks."""
    g = torch.Generator().manual_seed(3)
    budget_blocks = 3
    config = ColdAttentionConfig(path="sparse", sparse_budget_tokens=budget_blocks * LAYOUT.block_size)
    _, _, inputs, backend, storage = _tiered_step(tmp_path, config, g)
    long_seq = max(inputs.cold_seqs, key=lambda s: len(s.block_ids) if s.num_tokens == 1 else -1)
    assert long_seq.num_tokens == 1 and len(long_seq.block_ids) > 3 * budget_blocks
    step = backend.for_step([long_seq], SCALE)
    assert step is not None
    q = torch.randn(20, NUM_HEADS, 16, generator=g)
    for layer in range(LAYOUT.num_layers):
        o, lse = step.finish(step.begin(layer, q))
        keys = torch.stack(
            [
                _block(storage, t, b, layer)
                for t, b in zip(long_seq.block_tiers, long_seq.block_ids, strict=True)
            ]
        )
        summary = summarize_keys(keys[:, None])[:, 0]  # [blocks, 2, kv, dim]
        row = q[long_seq.token_start : long_seq.token_start + 1]
        chosen = select_blocks(block_scores_ref(row, summary), budget_blocks)
        k, v = keys[chosen, 0].flatten(0, 1), keys[chosen, 1].flatten(0, 1)
        o_ref, lse_ref = attend_unmasked_ref(row, k, v, SCALE)
        torch.testing.assert_close(o, o_ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(lse, lse_ref, rtol=1e-5, atol=1e-5)
    stats = backend.counters()
    assert 0 < stats.sparse_selected_blocks < stats.sparse_cold_blocks


def _block(storage: TieredKVStorage, tier: int, block_id: int, layer: int) -> torch.Tensor:
    """[2, block_size, num_kv_heads, head_dim] of one cold block and layer."""
    return storage.read_blocks(int(tier), [int(block_id)])[0, layer]


def test_summaries_follow_blocks_to_cpu_and_disk(tmp_path):
    g = torch.Generator().manual_seed(1)
    storage = TieredKVStorage(LAYOUT, 8, CPU, num_cpu_blocks=4, num_disk_blocks=4, disk_dir=tmp_path)
    storage.kv_cache.copy_(torch.randn(storage.kv_cache.shape, generator=g))
    summaries = BlockSummaries(storage)
    transfers = KVTransferEngine(storage, summaries=summaries)
    moves = [
        BlockMove(None, 0, TIER_GPU, 2, TIER_CPU, 0),
        BlockMove(None, 1, TIER_GPU, 3, TIER_CPU, 1),  # a run of two
        BlockMove(None, 2, TIER_GPU, 5, TIER_DISK, 3),
        BlockMove(None, 0, TIER_CPU, 0, TIER_DISK, 2),  # on from cpu to disk
        BlockMove(None, 3, TIER_GPU, 6, TIER_CPU, 0),  # into the freed cpu id
    ]
    transfers.execute(TransferPlan(moves))
    for tier, block_id in ((TIER_CPU, 0), (TIER_CPU, 1), (TIER_DISK, 3), (TIER_DISK, 2)):
        keys = storage.read_blocks(tier, [block_id])[0, :, 0]  # [layers, block_size, kv, dim]
        want = torch.stack([keys.amin(1), keys.amax(1)], dim=1)
        assert torch.equal(summaries.tensors[tier][block_id], want)
    assert summaries.valid[TIER_CPU].tolist() == [True, True, False, False]
    assert summaries.valid[TIER_DISK].tolist() == [False, False, True, True]
    assert summaries.num_spilled == 4 and summaries.num_late == 0
    # A block that reached a tier without a move is summarized from its host copy on demand.
    storage.cpu_cache[3] = torch.randn(storage.cpu_cache[3].shape, generator=g)
    summaries.ensure(TIER_CPU, np.array([0, 3]))
    assert summaries.num_late == 1
    assert torch.equal(summaries.tensors[TIER_CPU][3], summarize_keys(storage.cpu_cache[3:4])[0])


def test_block_scores_equal_the_definition_and_quest_bounds_bound_every_key():
    g = torch.Generator().manual_seed(5)
    blocks = torch.randn(9, 2, 4, 2, 16, generator=g)  # [blocks, k/v, block_size, kv, dim]
    summary = summarize_keys(blocks[:, None])[:, 0]
    q = torch.randn(3, 4, 16, generator=g)  # 3 rows, 4 heads over 2 kv heads
    scores = block_scores(q, summary)
    torch.testing.assert_close(scores, block_scores_ref(q, summary), rtol=1e-5, atol=1e-5)
    # the true max of q . k per (kv head, block) over the group's heads, rows and the block's keys
    qk = torch.einsum("rkgd,ntkd->knrgt", q.view(3, 2, 2, 16), blocks[:, 0]).flatten(2).amax(-1)
    bounds = quest_bounds(q, summary)
    assert (bounds >= qk - 1e-5).all()
    # the estimate lies between the box's center score and Quest's bound
    assert (scores <= bounds + 1e-5).all()
    center = torch.einsum("rkgd,nkd->knrg", q.view(3, 2, 2, 16), summary.mean(1)).flatten(2).amax(-1)
    assert (scores >= center - 1e-5).all()


def test_block_score_finds_the_aligned_key_that_quests_bound_misses():
    """Why the engine's score is not Quest's bound. Block 0 holds one key along q (q . k = 20)
    among keys near 0; block 1 holds keys that swing +-1 in all 64 channels independently (their
    q . k is a sum of 64 random signs: 14 at most over these 16 keys). Quest's bound adds the
    worst case of every channel (64 against 20) and ranks block 1 first; the estimate
    (q . center + ||q * half-width||_2: 10.8 against 8) ranks block 0 first."""
    g = torch.Generator().manual_seed(0)
    dim = 64
    q = torch.ones(1, 1, dim)  # one row, one head
    aligned = torch.randn(16, dim, generator=g) * 0.01
    aligned[5] = 20 / dim
    swinging = torch.randint(0, 2, (16, dim), generator=g).float() * 2 - 1
    blocks = torch.stack([aligned, swinging])[:, None, :, None, :].expand(2, 2, 16, 1, dim)
    summary = summarize_keys(blocks[:, None])[:, 0]
    true_max = torch.einsum("d,ntd->nt", q[0, 0], blocks[:, 0, :, 0]).amax(1)
    assert true_max[0] > 19 and true_max[1] < 16
    assert select_blocks(quest_bounds(q, summary), 1).tolist() == [1]
    assert select_blocks(block_scores(q, summary), 1).tolist() == [0]


def test_planted_blocks_are_chosen_by_id_over_heads():
    scores = torch.zeros(2, 20)
    scores[0, 3], scores[0, 11] = 9.0, 8.0  # kv head 0 wants 3 then 11
    scores[1, 17], scores[1, 5] = 0.9, 0.8  # kv head 1 (smaller scale) wants 17 then 5
    assert select_blocks(scores, 2).tolist() == [3, 17]  # each head's best
    assert select_blocks(scores, 4).tolist() == [3, 5, 11, 17]
    assert select_blocks(scores, 50).tolist() == list(range(20))


def test_selection_is_deterministic_and_breaks_ties_by_block_index():
    flat = torch.ones(2, 12)
    assert select_blocks(flat, 4).tolist() == [0, 1, 2, 3]
    g = torch.Generator().manual_seed(9)
    scores = torch.randint(0, 3, (4, 64), generator=g).float()  # many ties
    first = select_blocks(scores, 10)
    assert all(torch.equal(first, select_blocks(scores.clone(), 10)) for _ in range(3))
    assert first.tolist() == sorted(first.tolist()) and len(set(first.tolist())) == 10


def test_config_refuses_a_zero_budget():
    with pytest.raises(ValueError, match="sparse_budget_tokens must be at least 1"):
        ColdAttentionConfig(path="sparse", sparse_budget_tokens=0)


def test_a_prefill_row_is_never_sparse(tmp_path):
    storage = TieredKVStorage(LAYOUT, 8, CPU, num_cpu_blocks=4)
    storage.cpu_cache.copy_(torch.randn(storage.cpu_cache.shape))
    backend = ColdAttentionBackend(storage, ColdAttentionConfig(path="sparse", sparse_budget_tokens=4))
    seq = ColdSeq(0, 3, np.full(4, TIER_CPU), np.arange(4))
    step = backend.for_step([seq], SCALE)
    assert step is not None and step.sparse is None and len(step.cpu_parts) == 1


def test_summaries_of_an_fp8_pool_are_exact_fp8_values():
    blocks = torch.randn(3, 2, 2, 4, 2, 16).to(torch.float8_e4m3fn)  # [n, layers, k/v, block_size, kv, dim]
    summary = summarize_keys(blocks)
    assert summary.dtype == torch.float8_e4m3fn
    keys = blocks[:, :, 0].float()
    assert torch.equal(summary[:, :, 0].float(), keys.amin(2)) and torch.equal(
        summary[:, :, 1].float(), keys.amax(2)
    )


def test_summaries_of_an_int8_pool_bound_the_dequantized_keys():
    """int8 rows carry their own scales: min/max are taken over the dequantized keys (fp16)."""
    kv = torch.randn(3, 2, 2, 4, 2, 16) * torch.linspace(0.1, 9.0, 4).view(1, 1, 1, 4, 1, 1)
    blocks = quantize_kv(kv, torch.int8)  # per-token scales differ by a factor 90 here
    summary = summarize_keys(blocks)
    assert summary.dtype == torch.float16 and summary.shape == (3, 2, 2, 2, 16)
    keys = dequantize_kv(blocks)[:, :, 0]
    assert torch.equal(summary[:, :, 0], keys.amin(2).half()) and torch.equal(
        summary[:, :, 1], keys.amax(2).half()
    )
