"""Start-up primes the chat template's opening into the prefix cache (engine/warmup.py), so the
first chat request finds cached what every later one finds; the hit statistics stay as they
were; --no-kernel-warmup primes nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from kvspill.engine.core import LLMEngine
from kvspill.engine.warmup import chat_prefix_ids
from kvspill.errors import UnsupportedModelError
from kvspill.sampling_params import SamplingParams


class _Template:
    """A chat template over characters: '<s>sys|' then the user's text, then '|bot'."""

    chat_template: str | None = "fake"

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse

    def apply_chat_template(self, messages: Sequence[dict[str, Any]], **template_kwargs: Any) -> list[int]:
        if self.refuse:
            raise UnsupportedModelError("this template needs a system turn first")
        return [ord(c) for c in "<s>sys|" + messages[0]["content"] + "|bot"]


def test_the_opening_is_what_every_single_turn_chat_shares() -> None:
    assert chat_prefix_ids(_Template()) == [ord(c) for c in "<s>sys|"]


def test_no_template_or_a_refusing_one_primes_nothing() -> None:
    assert chat_prefix_ids(None) == []
    assert chat_prefix_ids(_Template(refuse=True)) == []
    no_template = _Template()
    no_template.chat_template = None
    assert chat_prefix_ids(no_template) == []


@pytest.fixture(scope="module")
def smol_engines() -> tuple[LLMEngine, LLMEngine]:
    """The embedded SmolLM2 on the CPU: the default start-up, and one with --no-kernel-warmup."""
    options: dict[str, Any] = dict(device="cpu", dtype="float32", max_model_len=1024)
    try:
        return LLMEngine(**options), LLMEngine(kernel_warmup=False, **options)
    except Exception as e:  # noqa: BLE001 - the embedded model is an optional package
        pytest.skip(f"the embedded model is not available: {e}")


def _first_chat(engine: LLMEngine) -> tuple[int, int]:
    """(tokens found cached, prompt tokens) of one chat request."""
    assert engine.tokenizer is not None
    ids = engine.tokenizer.apply_chat_template([{"role": "user", "content": "Why is the sky blue?"}])
    engine.add_request(ids, SamplingParams(max_tokens=1, temperature=0.0), req_id="first")
    outs = [o for step in engine.run() for o in step.outputs if o.finished]
    return outs[0].num_cached_tokens, len(ids)


@pytest.mark.slow
def test_the_first_chat_request_finds_the_opening_cached(smol_engines: tuple[LLMEngine, LLMEngine]) -> None:
    primed, cold = smol_engines
    assert "warm-up" in [name for name, _ in primed.startup_phases.durations]
    manager = primed.scheduler.kv_cache_manager
    assert (manager.prefix_cache_queries, manager.prefix_cache_hits) == (0, 0)  # start-up is not traffic
    assert manager.num_free_blocks == manager.num_blocks  # the primed blocks are evictable
    assert primed.tokenizer is not None
    opening = chat_prefix_ids(primed.tokenizer)
    block = primed.config.block_size
    assert len(opening) >= block
    cached, _ = _first_chat(primed)
    assert cached == len(opening) // block * block
    assert _first_chat(cold)[0] == 0
    assert "warm-up" not in [name for name, _ in cold.startup_phases.durations]
