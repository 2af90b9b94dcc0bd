"""The engine interface the server is written against (`EngineClient`): the real `LLMEngine`
satisfies it, statically (mypy checks the assignments below) and at run time (`isinstance`).
The fakes of tests/server check themselves the same way, in their own modules."""

from __future__ import annotations

from pathlib import Path

from kvspill.config import EngineConfig
from kvspill.engine.client import EngineClient, TokenizerClient
from kvspill.engine.core import LLMEngine
from kvspill.stats import KVStats
from kvspill.text.tokenizer import TokenizerBundle


def _served(engine: EngineClient) -> EngineClient:
    """What `create_app`/`AsyncEngine` do with their factory's engine: hold it as an EngineClient."""
    return engine


def test_llm_engine_is_an_engine_client(tiny_llama_dir: Path) -> None:
    engine = LLMEngine(EngineConfig(model=str(tiny_llama_dir), device="cpu", max_model_len=64))
    client = _served(engine)
    assert isinstance(client, EngineClient)
    assert isinstance(client.kv_stats(), KVStats)
    tokenizer = client.tokenizer
    assert isinstance(tokenizer, TokenizerBundle)
    as_client: TokenizerClient = tokenizer  # mypy: the bundle is what the server's routes call
    assert as_client.encode("a b") == tokenizer.encode("a b")


def test_an_object_missing_a_member_is_not_one() -> None:
    class NoStats:
        max_model_len = 64
        vocab_size = 100
        tokenizer = None

    assert not isinstance(NoStats(), EngineClient)
