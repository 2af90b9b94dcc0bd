"""The tensor-core kernel's tuning sweep (bench/mma_sweep.py) off the GPU: its grid, how the
dispatcher runs a config on wide weights, the pick, the arguments, and its output read back as
KVSPILL_MMA_CONFIGS."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kvspill.bench import mma_sweep
from kvspill.kernels.gguf_mma_configs import SPLIT_K_MAX_ROWS, MmaConfig, for_shape, parse_mma_configs


def test_grid_has_every_form_once_and_the_known_region_first():
    configs = mma_sweep.grid(("sub", "whole"))
    assert len(configs) == len(set(configs)) == 96
    assert not any(c.magic and c.whole for c in configs) and not any(c.words for c in configs)
    assert {(c.magic, c.whole) for c in configs} == {(False, False), (True, False), (False, True)}
    assert configs[0].block_n == 32 and configs[0].num_stages == 3 and configs[0].split_k == 4


def test_grid_sweeps_the_words_form_first():
    configs = mma_sweep.grid()
    words = [c for c in configs if c.words]
    assert len(configs) == len(set(configs)) == 96 + len(words) and configs[: len(words)] == words
    # The table's pick at a few tokens first (32 rows on 2 warps: mma.sync), in case the budget ends.
    assert (words[0].block_n, words[0].num_warps) == (32, 2)
    assert all(c.num_warps * 16 <= 2 * c.block_n for c in words)
    assert {c.two_acc for c in words} == {False, True} and {c.num_stages for c in words} == {2, 3, 4}
    assert {c.split_k for c in words} == {1, 2, 4, 8}
    assert mma_sweep.grid(("words",)) == words
    assert not any(c.words for c in mma_sweep.grid(("sub", "whole")))


def test_split_k_is_dropped_past_the_dispatchers_row_limit():
    cfg = MmaConfig(block_n=32, num_warps=2, split_k=4)
    assert for_shape(cfg, SPLIT_K_MAX_ROWS, 4096) == cfg
    assert for_shape(cfg, SPLIT_K_MAX_ROWS + 1, 4096).split_k == 1


@pytest.mark.parametrize(
    ("in_features", "sb_per_split", "most", "expected"),
    [
        (4096, 4, 16, 4),  # 16 super-blocks, 4 a program
        (14336, 4, 16, 16),  # 56 / 4 = 14 -> the next power of two
        (14336, 4, 8, 8),  # capped by split_k
        (3072, 4, 16, 4),  # 12 / 4 = 3 -> 4
        (4096, 1, 16, 16),
        (3072, 1, 16, 8),  # 12 super-blocks: at most 8 programs, each with one or more
        (256, 4, 16, 1),  # one super-block: no split
    ],
)
def test_split_k_follows_the_weights_depth(in_features, sb_per_split, most, expected):
    cfg = MmaConfig(block_n=64, num_warps=4, split_k=most, sb_per_split=sb_per_split, words=True)
    got = for_shape(cfg, 4096, in_features)
    assert (got.split_k, got.sb_per_split) == (expected, 0)
    assert for_shape(cfg, SPLIT_K_MAX_ROWS + 1, in_features).split_k == 1


def test_pick_takes_the_fastest_config_only_when_it_beats_today():
    a, b = MmaConfig(block_n=32, num_warps=2), MmaConfig(block_n=64, num_warps=4, whole=True)
    assert mma_sweep.pick(100.0, {a: 120.0, b: 90.0}) == b
    assert mma_sweep.pick(80.0, {a: 120.0, b: 90.0}) is None
    assert mma_sweep.pick(80.0, {}) is None


def test_picks_file_is_what_the_engine_reads():
    cfg = MmaConfig(block_n=64, num_warps=2, split_k=4, num_stages=3, whole=True)
    text = json.dumps({"Q6_K,16": dataclasses.asdict(cfg)})
    assert parse_mma_configs(text, "mma_configs.json") == {("Q6_K", 16): cfg}


def test_arguments_refuse_token_counts_the_dispatcher_has_no_key_for(capsys):
    with pytest.raises(SystemExit):
        mma_sweep._parse(["--tokens", "3"])
    assert "powers of two from 2 to 64" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        mma_sweep._parse(["--stage1-tokens", "12"])
    assert "got [12]" in capsys.readouterr().err
    args = mma_sweep._parse(["--types", "Q6_K", "--tokens", "8", "32"])
    assert args.tokens == [8, 32] and args.stage1_tokens == 8
    assert mma_sweep._parse(["--stage1-tokens", "32"]).stage1_tokens == 32


def test_main_without_a_gpu_says_so():
    assert mma_sweep.main([]) == 1


class _FakeBench:
    """Times in us: a config's time is its block_n (smaller is faster); today's path takes 40 a
    shape; a whole-super-block config fails (as one that does not compile would)."""

    def mma(self, qtype, shape, tokens, cfg):
        if cfg.whole:
            return dict(cfg=dataclasses.asdict(cfg), err="does not compile")
        return dict(cfg=dataclasses.asdict(cfg), us=float(cfg.block_n))

    def today(self, qtype, shape, tokens):
        return dict(path="gemv", us=40.0)


def test_stages_rank_pick_and_log(tmp_path):
    args = mma_sweep._parse(["--types", "Q6_K", "--tokens", "4", "8", "--out", str(tmp_path)])
    sweep = mma_sweep.Sweep(args, bench=_FakeBench())
    tops = sweep.stage1("Q6_K", mma_sweep.grid(("sub", "whole")))
    assert [c.block_n for c in tops] == [16, 16, 16] and not any(c.whole for c in tops)
    picks: dict = {}
    sweep.stage2("Q6_K", tops, picks)  # 16 us a shape against today's 40: picked at both counts
    assert set(picks) == {"Q6_K,4", "Q6_K,8"} and picks["Q6_K,8"]["block_n"] == 16
    assert parse_mma_configs(json.dumps(picks), "picks")[("Q6_K", 4)] == tops[0]
    lines = (tmp_path / "stage1.jsonl").read_text().splitlines()
    assert len(lines) == 3 * 96 and any('"err": "does not compile"' in ln for ln in lines)
    assert {json.loads(ln)["t"] for ln in lines} == {8}
    assert len((tmp_path / "stage2.jsonl").read_text().splitlines()) == 2 * 5
    slow = mma_sweep.Sweep(args, bench=_FakeBench())
    picks = {}
    slow.stage2("Q6_K", [MmaConfig(block_n=64, num_warps=2)], picks)  # 64 > 40: no pick
    assert picks == {}


def test_wide_weights_take_their_own_split():
    cfg = MmaConfig(block_n=64, num_warps=4, split_k=8, sb_per_split=4, words=True, wide_split_k=2)
    assert for_shape(cfg, SPLIT_K_MAX_ROWS + 1, 4096).split_k == 2
    assert for_shape(cfg, SPLIT_K_MAX_ROWS + 1, 256).split_k == 1  # one super-block: no split
    assert for_shape(cfg, SPLIT_K_MAX_ROWS, 4096).split_k == 4


class _WideBench(_FakeBench):
    """A words-form config split in two on wide weights is faster there (block_n / 2 us)."""

    def __init__(self) -> None:
        self.timed: list[tuple[str, int]] = []

    def mma(self, qtype, shape, tokens, cfg):
        self.timed.append((shape, cfg.wide_split_k))
        return dict(cfg=dataclasses.asdict(cfg), us=cfg.block_n / cfg.wide_split_k)


def test_stage2_tries_wide_weights_split_in_two_only_where_it_differs(tmp_path):
    args = mma_sweep._parse(["--types", "Q4_K", "--tokens", "8", "--out", str(tmp_path)])
    bench = _WideBench()
    picks: dict = {}
    top = MmaConfig(block_n=32, num_warps=2, words=True)
    mma_sweep.Sweep(args, bench=bench).stage2("Q4_K", [top], picks)
    assert picks["Q4_K,8"]["wide_split_k"] == 2
    assert {shape for shape, wide in bench.timed if wide == 2} == {"gate_up", "lm_head"}


class _TokensBench(_FakeBench):
    """Records the token counts stage 1 times at."""

    def __init__(self) -> None:
        self.tokens: set[int] = set()

    def mma(self, qtype, shape, tokens, cfg):
        self.tokens.add(tokens)
        return super().mma(qtype, shape, tokens, cfg)


def test_stage1_ranks_at_the_token_count_given(tmp_path):
    args = mma_sweep._parse(["--types", "Q4_K", "--stage1-tokens", "32", "--out", str(tmp_path)])
    bench = _TokensBench()
    mma_sweep.Sweep(args, bench=bench).stage1("Q4_K", mma_sweep.grid(("words",))[:4])
    assert bench.tokens == {32}
    assert {json.loads(ln)["t"] for ln in (tmp_path / "stage1.jsonl").read_text().splitlines()} == {32}
