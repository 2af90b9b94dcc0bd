"""End-to-end engine tests on tiny random-weight models against Hugging Face transformers.

Greedy generation must match `transformers.generate` token for token; chunked prefill, batching,
prefix reuse and preemption must not change a single token (fp32, CPU).
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from kvspill.engine.core import LLMEngine
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

NEW_TOKENS = 64


def _engine(model_dir, **opts) -> LLM:
    opts.setdefault("device", "cpu")
    opts.setdefault("dtype", "float32")
    opts.setdefault("block_size", 16)
    return LLM(str(model_dir), **opts)


def _prompts(vocab: int, lengths: list[int], seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]


def _hf_greedy(model_dir, prompt: list[int], n: int) -> list[int]:
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
        )
    return out[0, len(prompt) :].tolist()


GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_qwen2_dir", "tiny_qwen3_dir"])
def test_greedy_matches_transformers(fixture, request):
    model_dir = request.getfixturevalue(fixture)
    llm = _engine(model_dir)
    prompt = _prompts(llm.engine.vocab_size, [37])[0]
    ours = llm.generate([prompt], GREEDY)[0]
    assert ours.token_ids == _hf_greedy(model_dir, prompt, NEW_TOKENS)
    assert ours.finish_reason == "length"


def test_chunked_prefill_gives_the_same_logits(tiny_llama_dir, record_logits):
    prompt = _prompts(256, [100])[0]
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    reference = _engine(tiny_llama_dir, max_num_batched_tokens=2048)
    ref_logits = record_logits(reference)
    ref_out = reference.generate([prompt], params)[0]
    for chunk in (1, 7, 64):
        llm = _engine(tiny_llama_dir, max_num_batched_tokens=chunk)
        logits = record_logits(llm)
        out = llm.generate([prompt], params)[0]
        assert out.token_ids == ref_out.token_ids, f"chunk {chunk}"
        assert len(logits) == len(ref_logits)
        for got, want in zip(logits, ref_logits, strict=True):
            assert (got - want).abs().max().item() < 1e-4, f"chunk {chunk}"


def test_batch_of_eight_equals_each_alone(tiny_qwen2_dir):
    llm = _engine(tiny_qwen2_dir, max_num_batched_tokens=64)
    prompts = _prompts(llm.engine.vocab_size, [5, 17, 33, 1, 64, 90, 12, 48], seed=1)
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    together = [o.token_ids for o in llm.generate(prompts, params)]
    alone = [llm.generate([p], params)[0].token_ids for p in prompts]
    assert together == alone


def test_prefix_reuse_gives_the_same_tokens(tiny_llama_dir):
    shared = _prompts(256, [70], seed=2)[0]
    first, second = shared + [5, 6, 7], shared + [9, 10]
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    cold = _engine(tiny_llama_dir, enable_prefix_caching=False)
    want = [cold.generate([p], params)[0].token_ids for p in (first, second)]
    warm = _engine(tiny_llama_dir, enable_prefix_caching=True)
    got_first = warm.generate([first], params)[0]
    got_second = warm.generate([second], params)[0]
    assert [got_first.token_ids, got_second.token_ids] == want
    assert got_first.num_cached_tokens == 0
    assert got_second.num_cached_tokens == 64  # 4 full blocks of 16 shared tokens


def test_preemption_recomputes_to_the_same_tokens(tiny_llama_dir):
    prompts = _prompts(256, [40, 40, 40, 40], seed=3)
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    roomy = _engine(tiny_llama_dir)
    want = [o.token_ids for o in roomy.generate(prompts, params)]
    # 12 blocks of 16 = 192 tokens for 4 requests that grow to 80 tokens each: must preempt.
    tight = _engine(tiny_llama_dir, num_kv_blocks=12, enable_prefix_caching=False)
    got = [o.token_ids for o in tight.generate(prompts, params)]
    assert got == want
    assert tight.engine.scheduler.stats().num_preemptions > 0


def test_seeded_sampling_is_reproducible(tiny_qwen3_dir):
    llm = _engine(tiny_qwen3_dir)
    prompt = _prompts(llm.engine.vocab_size, [20], seed=4)[0]
    params = SamplingParams(temperature=0.9, top_p=0.9, seed=1234, max_tokens=20, ignore_eos=True)
    a = llm.generate([prompt], params)[0].token_ids
    other = SamplingParams(temperature=1.0, seed=7, max_tokens=20, ignore_eos=True)
    b = llm.generate([prompt, prompt], [params, other])[0].token_ids
    assert a == b


def test_engine_step_streams_deltas(tiny_llama_dir):
    engine: LLMEngine = _engine(tiny_llama_dir).engine
    engine.add_request(_prompts(256, [10])[0], SamplingParams(temperature=0, max_tokens=5, ignore_eos=True))
    deltas = []
    while engine.has_unfinished_requests():
        for out in engine.step():
            deltas.extend(out.delta_token_ids)
            last = out
    assert len(deltas) == 5 and last.token_ids == deltas and last.finished
