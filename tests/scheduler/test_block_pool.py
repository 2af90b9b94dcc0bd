"""BlockPool and KVCacheManager on a pool of 8 blocks of 4 tokens: exact block ids and eviction order."""

from __future__ import annotations

import pytest

from kvspill.kv.block_pool import BlockPool, KVCacheManager
from kvspill.sampling_params import SamplingParams
from kvspill.scheduler.request import Request

NUM_BLOCKS = 8
BLOCK_SIZE = 4


def make_request(req_id: str, prompt: list[int]) -> Request:
    return Request(req_id, prompt, SamplingParams(), frozenset(), 0.0, 64, BLOCK_SIZE)


def computed(manager: KVCacheManager, request: Request, num_new_tokens: int) -> list[int] | None:
    """Admit a request as the scheduler does: prefix hits, then slots, then mark computed."""
    hits, num_hit_tokens = manager.get_computed_blocks(request)
    block_ids = manager.allocate_slots(request, num_new_tokens, hits)
    if block_ids is not None:
        request.num_computed_tokens = num_hit_tokens + num_new_tokens
        manager.cache_blocks(request, request.num_computed_tokens)
    return block_ids


# ---- BlockPool ---------------------------------------------------------------------------


def test_allocate_takes_from_head_and_free_goes_to_tail() -> None:
    pool = BlockPool(NUM_BLOCKS, enable_caching=True)
    blocks = pool.allocate(3)
    assert [b.block_id for b in blocks] == [0, 1, 2]
    assert all(b.ref_cnt == 1 for b in blocks)
    assert pool.num_free_blocks == 5 and pool.usage == pytest.approx(3 / 8)
    pool.free(reversed(blocks))
    assert pool.free_block_ids() == [3, 4, 5, 6, 7, 2, 1, 0]
    assert [b.block_id for b in pool.allocate(6)] == [3, 4, 5, 6, 7, 2]
    with pytest.raises(ValueError):
        pool.allocate(3)


def test_block_zero_is_usable_and_double_free_is_caught() -> None:
    pool = BlockPool(2, enable_caching=False)
    blocks = pool.allocate(2)
    assert [b.block_id for b in blocks] == [0, 1]
    pool.free(blocks)
    with pytest.raises(ValueError):
        pool.free(blocks[:1])


def test_touch_pulls_a_freed_cached_block_out_of_the_free_queue() -> None:
    pool = BlockPool(NUM_BLOCKS, enable_caching=True)
    request = make_request("a", list(range(8)))
    blocks = pool.allocate(2)
    pool.cache_full_blocks(request, blocks, num_full_blocks=2)
    pool.free(reversed(blocks))
    assert pool.get_cached_block(request.block_hashes[0]) is blocks[0]
    pool.touch([blocks[0]])
    assert blocks[0].ref_cnt == 1
    assert pool.free_block_ids() == [2, 3, 4, 5, 6, 7, 1]
    pool.touch([blocks[0]])  # a second user of the same block
    assert blocks[0].ref_cnt == 2 and pool.num_free_blocks == 7


def test_allocation_evicts_the_hash_of_a_reused_block() -> None:
    pool = BlockPool(2, enable_caching=True)
    request = make_request("a", list(range(4)))
    (block,) = pool.allocate(1)
    pool.cache_full_blocks(request, [block], num_full_blocks=1)
    pool.free([block])
    assert pool.free_block_ids() == [1, 0]
    pool.allocate(1)  # block 1: block 0 stays cached
    assert pool.get_cached_block(request.block_hashes[0]) is block
    pool.allocate(1)  # block 0 reused
    assert pool.get_cached_block(request.block_hashes[0]) is None and block.block_hash is None


def test_take_uncached_skips_cached_blocks_and_cache_loaded_makes_one_findable() -> None:
    pool = BlockPool(4, enable_caching=True)
    request = make_request("a", list(range(8)))
    blocks = pool.allocate(2)
    pool.cache_full_blocks(request, blocks, num_full_blocks=2)
    pool.free(reversed(blocks))  # free queue [2, 3, 1, 0]: 1 and 0 cached
    taken = pool.take_uncached(3)
    assert [b.block_id for b in taken] == [2, 3] and pool.free_block_ids() == [1, 0]
    pool.cache_loaded(taken[0], block_hash=12345)  # read in: findable, cached-free at the tail
    pool.cache_loaded(taken[1], block_hash=None)  # the read failed: plain free
    assert pool.get_cached_block(12345) is taken[0] and pool.free_block_ids() == [1, 0, 2, 3]
    assert pool.get_cached_block(request.block_hashes[0]) is blocks[0]


# ---- KVCacheManager ----------------------------------------------------------------------


def test_allocate_slots_grows_the_block_table() -> None:
    manager = KVCacheManager(NUM_BLOCKS, BLOCK_SIZE, enable_prefix_caching=True)
    request = make_request("a", list(range(10)))
    assert manager.get_computed_blocks(request) == ([], 0)
    assert computed(manager, request, 6) == [0, 1]
    assert manager.allocate_slots(request, 4) == [2]
    request.num_computed_tokens = 10
    assert manager.allocate_slots(request, 1) == []  # token 11 fits block 2
    assert manager.get_block_ids(request) == [0, 1, 2]
    assert manager.num_free_blocks == 5


def test_allocate_slots_is_all_or_nothing() -> None:
    manager = KVCacheManager(NUM_BLOCKS, BLOCK_SIZE, enable_prefix_caching=True)
    a = make_request("a", list(range(20)))
    assert computed(manager, a, 20) == [0, 1, 2, 3, 4]
    b = make_request("b", list(range(100, 116)))
    assert manager.allocate_slots(b, 16) is None
    assert manager.get_block_ids(b) == [] and manager.num_free_blocks == 3
    assert manager.allocate_slots(b, 12) == [5, 6, 7]


def test_shared_prefix_gets_the_same_blocks_but_never_a_partial_block() -> None:
    manager = KVCacheManager(NUM_BLOCKS, BLOCK_SIZE, enable_prefix_caching=True)
    prefix = list(range(8))
    a = make_request("a", prefix + [50, 51])
    assert computed(manager, a, 10) == [0, 1, 2]
    b = make_request("b", prefix + [50, 51, 60])  # same partial block 2 tokens, plus one
    hits, num_hit_tokens = manager.get_computed_blocks(b)
    assert [blk.block_id for blk in hits] == [0, 1] and num_hit_tokens == 8
    assert manager.allocate_slots(b, 3, hits) == [0, 1, 3]
    assert manager.get_block_ids(b) == [0, 1, 3]
    assert [manager.block_pool.blocks[i].ref_cnt for i in (0, 1, 2, 3)] == [2, 2, 1, 1]
    assert (manager.prefix_cache_queries, manager.prefix_cache_hits) == (10 + 11, 8)


def test_whole_prompt_hit_leaves_the_last_token_to_compute() -> None:
    manager = KVCacheManager(NUM_BLOCKS, BLOCK_SIZE, enable_prefix_caching=True)
    a = make_request("a", list(range(8)))
    computed(manager, a, 8)
    b = make_request("b", list(range(8)))
    hits, num_hit_tokens = manager.get_computed_blocks(b)
    assert [blk.block_id for blk in hits] == [0] and num_hit_tokens == 4


def test_freed_prefix_comes_back_until_evicted() -> None:
    manager = KVCacheManager(NUM_BLOCKS, BLOCK_SIZE, enable_prefix_caching=True)
    a = make_request("a", list(range(10)))
    computed(manager, a, 10)
    manager.free(a)
    assert manager.block_pool.free_block_ids() == [3, 4, 5, 6, 7, 2, 1, 0]  # tail first
    b = make_request("b", list(range(9)))
    assert computed(manager, b, 1) == [0, 1, 3]  # hits 0, 1; block 2 had no hash
    assert manager.block_pool.free_block_ids() == [4, 5, 6, 7, 2]
    manager.free(b)
    filler = make_request("f", list(range(100, 124)))
    assert computed(manager, filler, 24) == [4, 5, 6, 7, 2, 3]
    c = make_request("c", list(range(9)))
    assert [blk.block_id for blk in manager.get_computed_blocks(c)[0]] == [0, 1]
    filler2 = make_request("g", list(range(200, 205)))
    assert computed(manager, filler2, 5) == [1, 0]  # evicts both cached blocks
    assert manager.get_computed_blocks(c) == ([], 0)


def test_evictable_hits_count_against_free_blocks() -> None:
    manager = KVCacheManager(4, BLOCK_SIZE, enable_prefix_caching=True)
    a = make_request("a", list(range(12)))
    computed(manager, a, 12)
    manager.free(a)
    b = make_request("b", list(range(12)) + list(range(100, 109)))  # 21 tokens: 6 blocks
    hits, _ = manager.get_computed_blocks(b)
    assert len(hits) == 3
    assert manager.num_blocks_to_allocate(b, 9, hits) == 3 + 3
    assert manager.allocate_slots(b, 9, hits) is None
    assert manager.num_free_blocks == 4 and all(blk.ref_cnt == 0 for blk in hits)
    assert manager.allocate_slots(b, 4, hits) == [0, 1, 2, 3]


def test_no_prefix_caching() -> None:
    manager = KVCacheManager(NUM_BLOCKS, BLOCK_SIZE, enable_prefix_caching=False)
    a = make_request("a", list(range(8)))
    computed(manager, a, 8)
    manager.free(a)
    assert manager.get_computed_blocks(make_request("b", list(range(9)))) == ([], 0)
    assert manager.prefix_cache_queries == 0 and manager.prefix_hit_rate == 0.0
