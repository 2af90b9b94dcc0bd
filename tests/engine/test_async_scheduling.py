"""Async scheduling end to end on the CPU: the engine one step ahead gives exactly the tokens,
logprobs, stops and finish reasons of the synchronous engine, through chunked prefill, mixed
batches, sampling options, preemption, KV tiers and aborts."""

from __future__ import annotations

import pytest
import torch

from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

BASE = dict(device="cpu", dtype="float32", block_size=8, max_model_len=256, max_num_batched_tokens=32)


def _prompts(n: int, seed: int = 3) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randint(3, 256, (int(length),), generator=gen).tolist()
        for length in torch.randint(4, 70, (n,), generator=gen)
    ]


def _both(model_dir, prompts, params, **opts) -> tuple[list, list, LLM]:
    runs = []
    for async_scheduling in (False, True):
        llm = LLM(str(model_dir), **{**BASE, **opts, "async_scheduling": async_scheduling})
        assert llm.engine.async_scheduling is async_scheduling
        runs.append((llm.generate(prompts, params), llm))
    (sync_out, _), (async_out, async_llm) = runs
    return sync_out, async_out, async_llm


def _assert_same(sync_out, async_out) -> None:
    for s, a in zip(sync_out, async_out, strict=True):
        assert a.token_ids == s.token_ids
        assert (a.finish_reason, a.stop_reason, a.text) == (s.finish_reason, s.stop_reason, s.text)
        assert len(a.logprobs) == len(s.logprobs)
        for la, ls in zip(a.logprobs, s.logprobs, strict=True):
            assert la.token_id == ls.token_id and la.logprob == pytest.approx(ls.logprob, abs=1e-5)
            assert [t for t, _ in la.top] == [t for t, _ in ls.top]


def test_greedy_batch_with_chunked_prefill(tiny_llama_dir):
    prompts = _prompts(8)
    params = [SamplingParams(temperature=0, max_tokens=m) for m in (1, 2, 3, 5, 9, 17, 24, 33)]
    sync_out, async_out, _ = _both(tiny_llama_dir, prompts, params)
    _assert_same(sync_out, async_out)
    assert [len(o.token_ids) for o in async_out] == [1, 2, 3, 5, 9, 17, 24, 33]


def test_stop_tokens_and_stop_strings(tiny_llama_dir):
    prompts = _prompts(3, seed=5)
    plain = LLM(str(tiny_llama_dir), **BASE).generate(prompts, SamplingParams(temperature=0, max_tokens=20))
    stop_id = plain[0].token_ids[6]  # stops the first request early
    words = plain[1].text.split()
    stop_str = words[len(words) // 2] if words else "zzz"
    params = [
        SamplingParams(temperature=0, max_tokens=20, stop_token_ids=[stop_id]),
        SamplingParams(temperature=0, max_tokens=20, stop=[stop_str]),
        SamplingParams(temperature=0, max_tokens=20, stop=[stop_str], include_stop_str_in_output=True),
    ]
    sync_out, async_out, _ = _both(tiny_llama_dir, prompts, params)
    _assert_same(sync_out, async_out)
    assert async_out[0].finish_reason == "stop" and async_out[0].stop_reason == stop_id


def test_sampling_options_penalties_seeds_and_logprobs(tiny_llama_dir):
    prompts = _prompts(6, seed=9)
    params = [
        SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=11, max_tokens=12),
        SamplingParams(temperature=1.0, min_p=0.05, seed=12, max_tokens=12, logprobs=3),
        SamplingParams(
            temperature=0, repetition_penalty=1.5, frequency_penalty=0.5, presence_penalty=0.3, max_tokens=12
        ),
        SamplingParams(temperature=0.7, seed=13, repetition_penalty=1.3, max_tokens=12),
        SamplingParams(temperature=0, min_tokens=8, max_tokens=12, logprobs=2),
        SamplingParams(temperature=0, max_tokens=12),
    ]
    sync_out, async_out, _ = _both(tiny_llama_dir, prompts, params)
    _assert_same(sync_out, async_out)


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_preemption_under_a_small_pool(tiny_llama_dir, prefix_caching):
    prompts = _prompts(6, seed=21)
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    sync_out, async_out, llm = _both(
        tiny_llama_dir, prompts, params, num_kv_blocks=24, enable_prefix_caching=prefix_caching
    )
    _assert_same(sync_out, async_out)
    assert llm.engine.scheduler.num_preemptions > 0


def test_spill_to_the_cpu_tier(tiny_llama_dir):
    prompts = _prompts(4, seed=31)
    params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    sync_out, async_out, llm = _both(
        tiny_llama_dir,
        prompts,
        params,
        num_kv_blocks=12,
        num_cpu_kv_blocks=80,
        num_sink_blocks=1,
        hot_window_tokens=8,
        enable_prefix_caching=False,
    )
    _assert_same(sync_out, async_out)
    assert llm.engine.kv_stats().total_bytes_moved > 0


def test_abort_while_a_step_is_in_flight(tiny_llama_dir):
    prompts = _prompts(2, seed=41)
    params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    want = LLM(str(tiny_llama_dir), **BASE).generate([prompts[1]], params)[0].token_ids
    engine = LLM(str(tiny_llama_dir), **{**BASE, "async_scheduling": True}).engine
    engine.add_request(prompts[0], params, req_id="gone")
    engine.add_request(prompts[1], params, req_id="kept")
    finished, seen_gone = {}, 0
    for i in range(200):
        if not engine.has_unfinished_requests():
            break
        if i == 6:
            engine.abort_request("gone")
        for out in engine.step():
            seen_gone += out.req_id == "gone"
            if out.finished:
                finished[out.req_id] = out
    assert list(finished) == ["kept"] and finished["kept"].token_ids == want
    assert 0 < seen_gone < 30
    assert engine.scheduler.kv_cache_manager.usage == 0.0
