"""KVTransferEngine: bytes survive any route between tiers; neighbouring moves are one copy."""

from __future__ import annotations

import pytest
import torch

from kvspill.kernels.kv_quant import dequantize_kv, int8_scales, quantize_kv
from kvspill.storage.storage import KVLayout, TieredKVStorage
from kvspill.storage.transfer import CopyRun, KVTransferEngine, group_moves
from kvspill.types import TIER_CPU, TIER_DISK, TIER_GPU, BlockMove, TransferPlan

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
LAYOUT = KVLayout(num_layers=2, block_size=4, num_kv_heads=2, head_dim=16, dtype=torch.bfloat16)


def _storage(tmp_path, n: int = 16) -> TieredKVStorage:
    storage = TieredKVStorage(LAYOUT, n, DEVICE, num_cpu_blocks=n, num_disk_blocks=n, disk_dir=tmp_path)
    storage.kv_cache.copy_(torch.randn(storage.kv_cache.shape).to(LAYOUT.dtype))
    return storage


def _moves(src_tier: int, src: list[int], dst_tier: int, dst: list[int]) -> list[BlockMove]:
    return [BlockMove(None, 0, src_tier, s, dst_tier, d) for s, d in zip(src, dst, strict=True)]


def test_random_blocks_round_trip_through_every_tier(tmp_path):
    g = torch.Generator().manual_seed(0)
    storage = _storage(tmp_path)
    engine = KVTransferEngine(storage)
    original = storage.kv_cache.clone()
    gpu_ids = torch.randperm(16, generator=g)[:7].tolist()
    cpu_ids = torch.randperm(16, generator=g)[:7].tolist()
    disk_ids = torch.randperm(16, generator=g)[:7].tolist()
    back_ids = torch.randperm(16, generator=g)[:7].tolist()
    engine.execute(TransferPlan(_moves(TIER_GPU, gpu_ids, TIER_CPU, cpu_ids)))
    storage.kv_cache[gpu_ids] = 0  # the freed gpu blocks are reused by others
    engine.execute(TransferPlan(_moves(TIER_CPU, cpu_ids, TIER_DISK, disk_ids)))
    storage.cpu_cache.zero_()
    engine.execute(TransferPlan(_moves(TIER_DISK, disk_ids, TIER_GPU, back_ids)))
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
    assert torch.equal(storage.kv_cache[back_ids].cpu(), original[gpu_ids].cpu())
    block = LAYOUT.block_bytes
    stats = engine.counters()
    moved = stats.bytes_by_direction
    assert moved["gpu_to_cpu"] == moved["cpu_to_disk"] == moved["disk_to_gpu"] == 7 * block
    assert stats.num_moves == 21 and stats.num_plans == 3


def test_direct_gpu_disk_moves_and_reuse_of_freed_ids_in_one_plan(tmp_path):
    storage = _storage(tmp_path)
    engine = KVTransferEngine(storage)
    original = storage.kv_cache.clone()
    plan = TransferPlan(
        [
            BlockMove("a", 1, TIER_GPU, 5, TIER_CPU, 0),  # frees gpu 5 ...
            BlockMove("a", 1, TIER_CPU, 0, TIER_DISK, 3),  # ... chained on to disk, freeing cpu 0 ...
            BlockMove("b", 2, TIER_GPU, 6, TIER_CPU, 0),  # ... which takes another block
            BlockMove("a", 1, TIER_DISK, 3, TIER_GPU, 9),  # and the first one comes back elsewhere
            BlockMove("c", 0, TIER_GPU, 7, TIER_DISK, 4),
            BlockMove("c", 0, TIER_DISK, 4, TIER_GPU, 5),  # into the id freed by the first move
        ]
    )
    engine.execute(plan)
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
    assert torch.equal(storage.kv_cache[9].cpu(), original[5].cpu())
    assert torch.equal(storage.kv_cache[5].cpu(), original[7].cpu())
    assert torch.equal(storage.cpu_cache[0], original[6].cpu())
    assert engine.stats.num_copies == 6


def test_consecutive_ids_become_one_copy(tmp_path):
    moves = _moves(TIER_GPU, [3, 4, 5, 9, 10, 2], TIER_CPU, [7, 8, 9, 10, 11, 0])
    moves += _moves(TIER_CPU, [1, 2], TIER_DISK, [4, 5])
    assert group_moves(moves) == [
        CopyRun(TIER_GPU, 3, TIER_CPU, 7, 3),
        CopyRun(TIER_GPU, 9, TIER_CPU, 10, 2),
        CopyRun(TIER_GPU, 2, TIER_CPU, 0, 1),
        CopyRun(TIER_CPU, 1, TIER_DISK, 4, 2),
    ]
    # Same-tier moves are never merged (their ranges could overlap).
    assert len(group_moves(_moves(TIER_GPU, [0, 1], TIER_GPU, [1, 2]))) == 2
    storage = _storage(tmp_path)
    original = storage.kv_cache.clone()
    engine = KVTransferEngine(storage)
    engine.execute(TransferPlan(moves[:6]))
    assert engine.stats.num_copies == 3 and engine.stats.num_moves == 6
    assert engine.stats.bytes_by_direction == {"gpu_to_cpu": 6 * LAYOUT.block_bytes}
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
    assert torch.equal(storage.cpu_cache[7:12], original[[3, 4, 5, 9, 10]].cpu())


def test_out_of_range_ids_fail_loudly(tmp_path):
    engine = KVTransferEngine(_storage(tmp_path, n=4))
    with pytest.raises(AssertionError, match="outside the cpu tier"):
        engine.execute(TransferPlan(_moves(TIER_GPU, [0], TIER_CPU, [4])))


def test_int8_blocks_keep_values_and_scales_through_every_tier(tmp_path):
    """--kv-cache-dtype int8: a block carries its rows' fp32 scales (kernels/kv_quant.py), so it
    moved gpu -> cpu -> disk -> gpu keeps every value and scale, and reads back the same K/V."""
    layout = KVLayout(num_layers=2, block_size=4, num_kv_heads=2, head_dim=16, dtype=torch.int8)
    assert layout.row_dim == 20 and layout.block_bytes == 2 * 2 * 4 * 2 * 20
    storage = TieredKVStorage(layout, 8, DEVICE, num_cpu_blocks=8, num_disk_blocks=8, disk_dir=tmp_path)
    kv = torch.randn((8, 2, 2, 4, 2, 16), generator=torch.Generator().manual_seed(3)) * 5
    storage.kv_cache.copy_(quantize_kv(kv, torch.int8))
    original = storage.kv_cache.clone()
    engine = KVTransferEngine(storage)
    engine.execute(TransferPlan(_moves(TIER_GPU, [1, 2, 6], TIER_CPU, [5, 0, 3])))
    storage.kv_cache[[1, 2, 6]] = 0
    engine.execute(TransferPlan(_moves(TIER_CPU, [5, 0, 3], TIER_DISK, [7, 2, 4])))
    storage.cpu_cache.zero_()
    engine.execute(TransferPlan(_moves(TIER_DISK, [7, 2, 4], TIER_GPU, [0, 3, 5])))
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
    back, want = storage.kv_cache[[0, 3, 5]].cpu(), original[[1, 2, 6]].cpu()
    assert torch.equal(back, want)
    assert torch.equal(int8_scales(back), int8_scales(want)) and (int8_scales(back) > 0).all()
    deq = dequantize_kv(back)
    assert ((deq - kv[[1, 2, 6]]).abs() <= int8_scales(back)[..., None] * 0.5 * (1 + 1e-5)).all()
