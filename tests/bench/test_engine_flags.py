"""The benchmark scripts speak the product's engine flags: the same names, parsers and
EngineConfig fields as `kvspill serve` (kvspill.options), and nothing else for engine settings."""

from __future__ import annotations

import argparse

import pytest

from kvspill.bench import (
    concurrent_bench,
    engine_bench,
    kv_quality,
    mixed_bench,
    prefix_bench,
    profile_decode,
    sparse_quality,
)
from kvspill.bench.engine_flags import REQUIRED, add_engine_flags, engine_kwargs
from kvspill.options import option_names

GIB = 2**30
PARSERS = {
    "engine_bench": engine_bench._parse,
    "concurrent_bench": concurrent_bench._parse,
    "prefix_bench": prefix_bench._parse,
    "mixed_bench": mixed_bench._parse,
    "profile_decode": profile_decode._parse,
    "kv_quality": kv_quality._parse,
    "sparse_quality": sparse_quality._parse,
}
# A script's own flags: what it measures, not how the engine is set up.
OWN = {"--shape", "--model", "--ctx", "--new-tokens", "--warmup-tokens", "--mode", "--out", "--concurrency",
       "--fill-only-prefill", "--question-tokens", "--questions", "--phases", "--disk-phase-cpu-blocks",
       "--target-itl-ms", "--short-prompt", "--steady", "--chats", "--chat-tokens", "--settle", "--long",
       "--long-prompt", "--skip-mixed", "--steps", "--kernels", "--profiler-window", "--tokens", "--per-layer", "--search-skip",
       "--greedy-tokens", "--prompt", "--budgets", "--score", "--dense-layers", "--help"}  # fmt: skip


class _Built(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def _options(parse, monkeypatch) -> set[str]:
    """Every option string of the parser a script's `_parse` builds."""

    def capture(self, *args, **kwargs):
        raise _Built(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(_Built) as built:
        parse([])
    return {s for action in built.value.parser._actions for s in action.option_strings if s.startswith("--")}


@pytest.mark.parametrize("script", sorted(PARSERS))
def test_every_engine_setting_is_a_product_flag(script, monkeypatch):
    used = _options(PARSERS[script], monkeypatch)
    product = {"--" + n.replace("_", "-") for n in option_names()}
    product |= {"--no-" + n.replace("_", "-") for n in option_names()}
    assert used - OWN <= product, f"{script} takes engine flags the product does not: {used - OWN - product}"
    old = {
        "--cap-gib",
        "--chunk",
        "--cpu-kv-gib",
        "--hot-window",
        "--persist-dir",
        "--skip-layers",
        "--sink-blocks",
    }
    assert not old & used


def test_sizes_and_token_counts_are_read_as_the_product_reads_them():
    args = engine_bench._parse(
        [
            "--vram-budget",
            "16GiB",
            "--ctx",
            "8192",
            "32K",
            "--max-num-batched-tokens",
            "8K",
            "--cpu-kv-budget",
            "40G",
            "--hot-window-tokens",
            "1K",
            "--no-async-scheduling",
        ]  # fmt: skip
    )
    assert args.ctx == [8192, 32768]
    config = engine_bench.bench_config(args, max_len=40_000, max_num_seqs=8)
    assert (config.vram_budget_bytes, config.cpu_kv_budget_bytes) == (16 * GIB, 40 * GIB)
    assert (config.max_num_batched_tokens, config.hot_window_tokens) == (8192, 1024)
    assert config.async_scheduling is False and config.max_model_len == 40_960
    assert (config.block_size, config.enable_prefix_caching, config.skip_tokenizer_init) == (16, False, True)


def test_a_size_without_a_unit_is_refused(capsys):
    with pytest.raises(SystemExit):
        engine_bench._parse(["--vram-budget", "16", "--ctx", "8192"])
    assert "16GiB" in capsys.readouterr().err  # the product's message: write 16GiB, 16GB or 16MiB


def test_the_json_fields_keep_their_names_and_values():
    """`cap_gib`, `cpu_kv_gib`, `chunk` and `mode` of a row are what `--cap-gib 24 --cpu-kv-gib 40
    --chunk 16384 --cold-attention sparse` gave before the flags took the product's names."""
    args = engine_bench._parse(
        [
            "--vram-budget",
            "24GiB",
            "--cpu-kv-budget",
            "40GiB",
            "--max-num-batched-tokens",
            "16384",
            "--cold-attention",
            "sparse",
            "--sparse-prompt-window",
            "64",
            "--ctx",
            "1M",
        ]  # fmt: skip
    )
    flags = engine_bench.bench_flags(args)
    assert (flags["vram_budget_bytes"] / GIB, flags["cpu_kv_budget_bytes"] / GIB) == (24.0, 40.0)
    assert flags["max_num_batched_tokens"] == 16384
    assert engine_bench.mode_label(args) == "tiers-sparse-4096-prompt64x0.5"
    fewer = concurrent_bench._parse(["--vram-budget", "16GiB", "--ctx", "512"])
    assert engine_bench.mode_label(fewer) == "gpu-kv"
    assert engine_bench.bench_flags(fewer)["block_size"] == 16  # fixed where a script takes no flag


def test_only_product_flags_can_be_added_and_only_they_reach_the_config():
    ap = argparse.ArgumentParser()
    with pytest.raises(KeyError):
        add_engine_flags(ap, cap_gib="16")
    ap = argparse.ArgumentParser()
    ap.add_argument("--target-itl-ms", nargs="+")  # a script's own sweep of an engine setting
    add_engine_flags(ap, vram_budget=REQUIRED, kernel_warmup=True)
    add_engine_flags(ap, kv_persist_budget="64GiB")
    args = ap.parse_args(["--vram-budget", "1GiB", "--no-kernel-warmup", "--target-itl-ms", "0", "auto"])
    assert engine_kwargs(args) == {
        "vram_budget_bytes": GIB,
        "kernel_warmup": False,
        "kv_persist_budget_bytes": 64 * GIB,
    }
