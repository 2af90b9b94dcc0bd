"""`SamplingParams.prompt_logprobs` against a Hugging Face forward on the tiny Llama (fp32, CPU):
every prompt token's logprob given its prefix and the top-k, across chunked-prefill boundaries,
with prefix-cache hits and with most of the KV in the cpu tier."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from kvspill.errors import InvalidParameterError
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

PROMPT_LEN = 100
TOP_K = 3


@pytest.fixture(scope="module")
def prompt() -> list[int]:
    return torch.randint(3, 256, (PROMPT_LEN,), generator=torch.Generator().manual_seed(5)).tolist()


@pytest.fixture(scope="module")
def hf_logprobs(tiny_llama_dir, prompt) -> torch.Tensor:
    """[PROMPT_LEN - 1, vocab]: row i is the distribution of prompt token i + 1."""
    model = AutoModelForCausalLM.from_pretrained(str(tiny_llama_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].float()
    return logits[:-1].log_softmax(dim=-1)


def _llm(model_dir, **opts) -> LLM:
    base = dict(device="cpu", dtype="float32", block_size=8, max_model_len=256)
    base.update(opts)
    return LLM(str(model_dir), **base)


def _check(got, prompt: list[int], want: torch.Tensor) -> None:
    assert got is not None and len(got) == len(prompt)
    assert got[0] is None
    for i, entry in enumerate(got[1:]):
        assert entry is not None and entry.token_id == prompt[i + 1]
        assert abs(entry.logprob - want[i, prompt[i + 1]].item()) < 1e-4, f"position {i + 1}"
        vals, ids = want[i].topk(TOP_K)
        assert [t for t, _ in entry.top] == ids.tolist()
        assert max(abs(v - w) for (_, v), w in zip(entry.top, vals.tolist(), strict=True)) < 1e-4


@pytest.mark.parametrize("chunk", [7, 64, 2048])
def test_prompt_logprobs_equal_transformers_across_chunks(tiny_llama_dir, prompt, hf_logprobs, chunk):
    llm = _llm(tiny_llama_dir, max_num_batched_tokens=chunk)
    params = SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=TOP_K)
    out = llm.generate([prompt], params)[0]
    _check(out.prompt_logprobs, prompt, hf_logprobs)
    assert out.num_output_tokens == 2


def test_prefix_cache_hits_do_not_skip_scoring(tiny_llama_dir, prompt, hf_logprobs):
    llm = _llm(tiny_llama_dir, max_num_batched_tokens=32, enable_prefix_caching=True)
    plain = SamplingParams(temperature=0, max_tokens=1)
    llm.generate([prompt], plain)  # its full blocks enter the prefix cache
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=TOP_K))[0]
    _check(out.prompt_logprobs, prompt, hf_logprobs)
    assert out.num_cached_tokens == 0
    assert llm.generate([prompt], plain)[0].num_cached_tokens > 0  # the cache still serves others


def test_prompt_logprobs_with_cold_kv(tiny_llama_dir, prompt, hf_logprobs):
    llm = _llm(
        tiny_llama_dir,
        max_num_batched_tokens=16,
        num_kv_blocks=5,
        num_cpu_kv_blocks=20,
        num_sink_blocks=1,
        hot_window_tokens=8,
        enable_prefix_caching=False,
    )
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=TOP_K))[0]
    _check(out.prompt_logprobs, prompt, hf_logprobs)
    assert llm.engine.kv_stats().max_cold_fraction > 0.5


def test_no_prompt_logprobs_unless_asked_and_range_checked(tiny_llama_dir, prompt):
    llm = _llm(tiny_llama_dir)
    assert llm.generate([prompt], SamplingParams(temperature=0, max_tokens=1))[0].prompt_logprobs is None
    with pytest.raises(InvalidParameterError, match="prompt_logprobs"):
        SamplingParams(prompt_logprobs=21)
