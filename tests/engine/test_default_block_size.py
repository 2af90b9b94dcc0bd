"""`--block-size` left out: 16, or 8 for a sparse budget under 64 blocks of 16 (config.default_block_size).
No model is loaded here."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvspill.cli.eval_cmd import _configuration
from kvspill.config import EngineConfig, default_block_size
from kvspill.options import EngineOptions


@pytest.mark.parametrize(
    ("cold_attention", "budget", "want"),
    [
        ("auto", 4096, 16),
        ("stream", 256, 16),  # the budget only matters to sparse mode
        ("sparse", 4096, 16),  # W5's budget: 256 blocks of 16
        ("sparse", 1024, 16),  # 64 blocks of 16
        ("sparse", 1023, 8),
        ("sparse", 512, 8),  # 1/8 of 4K: 32 blocks of 16 lost 6.3 points on the code task (CPU)
        ("sparse", 256, 8),  # 1/8 of 2K: 16 blocks of 16 would be too few places
        ("sparse", 8, 8),
    ],
)
def test_the_default_block_size_follows_a_sparse_budget(cold_attention, budget, want):
    assert default_block_size(cold_attention, budget) == want
    config = EngineConfig(cold_attention=cold_attention, sparse_budget_tokens=budget)
    assert config.block_size == want


def test_a_given_block_size_is_kept_and_survives_replace():
    given = EngineConfig(cold_attention="sparse", sparse_budget_tokens=256, block_size=16)
    assert given.block_size == 16
    auto = EngineConfig(cold_attention="sparse", sparse_budget_tokens=256)
    assert replace(auto, max_num_seqs=2).block_size == 8
    assert EngineConfig().block_size == 16


def test_a_budget_under_one_default_block_is_still_refused():
    with pytest.raises(ValueError, match="at least one block"):
        EngineConfig(cold_attention="sparse", sparse_budget_tokens=4)


def test_eval_sizes_its_hot_tiers_with_the_block_size_the_engine_will_take():
    # `kvspill eval --hot-kv-tokens 256` at 2K with sparse 1/8: the engine takes 8-token blocks,
    # so the gpu tier is counted in blocks of 8: 1 sink + 2 x 256 / 8 + 2 spare
    args = ["cold_attention=sparse", "sparse_budget_tokens=256"]
    kwargs = _configuration(EngineOptions(), args, "256", [2048])
    assert kwargs["block_size"] == 8 and kwargs["num_kv_blocks"] == 1 + 64 + 2
    assert EngineConfig(**kwargs).block_size == 8
    given = _configuration(EngineOptions(), [*args, "block_size=16"], "256", [2048])
    assert given["block_size"] == 16 and given["num_kv_blocks"] == 1 + 32 + 2


@pytest.mark.parametrize(
    "args",
    [[], ["cold_attention=sparse", "sparse_budget_tokens=256"], ["cold_attention=sparse"], ["block_size=32"]],
)
def test_eval_tiers_hold_the_longest_length_in_the_engines_own_blocks(args):
    # hot_kv_kwargs counts in a block size; the engine must take that one, whatever its default
    kwargs = _configuration(EngineOptions(), args, "256", [2048, 4096])
    config = EngineConfig(**kwargs)
    assert config.block_size == kwargs["block_size"]
    assert config.num_cpu_kv_blocks * config.block_size >= 4096
    assert config.num_kv_blocks * config.block_size >= config.block_size + 2 * 256
