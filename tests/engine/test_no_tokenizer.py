"""A `random:` model has no tokenizer: token-id prompts work; what needs text says why it cannot."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kvspill import LLM, SamplingParams
from kvspill.errors import KvspillError
from kvspill.plan.spec import KNOWN_SHAPES, ModelSpec

TINY = ModelSpec(
    architecture="llama",
    num_layers=2,
    hidden_size=64,
    intermediate_size=128,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    vocab_size=256,
    tie_word_embeddings=True,
    max_position_embeddings=1024,
    weight_dtype_bytes=2,
    name="tiny-test",
)


@pytest.fixture(scope="module")
def llm() -> Iterator[LLM]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(KNOWN_SHAPES, "tiny-test", TINY)
        yield LLM("random:tiny-test", device="cpu", dtype="float32", max_model_len=64)


def test_token_id_prompts_run(llm: LLM) -> None:
    params = SamplingParams(temperature=0, max_tokens=3, detokenize=False, ignore_eos=True)
    [out] = llm.generate([[1, 2, 3]], params)
    assert len(out.token_ids) == 3 and out.finish_reason == "length"


def test_text_needs_a_tokenizer(llm: LLM) -> None:
    with pytest.raises(KvspillError, match="no tokenizer"):
        _ = llm.tokenizer
    with pytest.raises(KvspillError, match="no tokenizer"):
        llm.chat([{"role": "user", "content": "hi"}])
    with pytest.raises(KvspillError, match="no tokenizer"):
        llm.generate("hi", SamplingParams(detokenize=False))


def test_skip_tokenizer_init_loads_a_real_model_without_its_tokenizer(tiny_llama_dir) -> None:
    """vLLM's skip_tokenizer_init: token ids in and out; eos still comes from config.json."""
    llm = LLM(str(tiny_llama_dir), device="cpu", dtype="float32", max_model_len=64, skip_tokenizer_init=True)
    assert llm.engine.tokenizer is None
    assert llm.engine.bundle.eos_token_ids  # from config.json's eos_token_id
    [out] = llm.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=2, detokenize=False))
    assert 1 <= len(out.token_ids) <= 2
    with pytest.raises(KvspillError, match="no tokenizer"):
        llm.generate("hi", SamplingParams(detokenize=False))
