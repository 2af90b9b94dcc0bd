"""The one step loop, `LLMEngine.run()`, on the CPU with the tiny Llama: step by step it yields
what the hand-written loop it replaced (`while has_unfinished_requests(): step()`) returned,
with and without async scheduling; requests added while it runs join it; leaving it early leaves
the rest queued for the next `run()`."""

from __future__ import annotations

import pytest
import torch

from kvspill.engine.core import LLMEngine
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams
from kvspill.types import RequestOutput

BASE = dict(device="cpu", dtype="float32", block_size=8, max_model_len=256, max_num_batched_tokens=32)


def _prompts(n: int, seed: int = 11) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randint(3, 256, (int(length),), generator=gen).tolist()
        for length in torch.randint(4, 60, (n,), generator=gen)
    ]


def _params() -> list[SamplingParams]:
    """Greedy and seeded sampling, a stop string, lengths that end in different steps."""
    return [
        SamplingParams(temperature=0, max_tokens=7),
        SamplingParams(temperature=0.8, top_p=0.9, seed=5, max_tokens=12),
        SamplingParams(temperature=0, max_tokens=3, logprobs=2),
        SamplingParams(temperature=0, max_tokens=20, stop=["e"]),
    ]


def _engine(model_dir, async_scheduling: bool) -> LLMEngine:
    return LLMEngine(model=str(model_dir), **BASE, async_scheduling=async_scheduling)


def _add_all(engine: LLMEngine) -> None:
    for i, (prompt, params) in enumerate(zip(_prompts(4), _params(), strict=True)):
        engine.add_request(prompt, params, req_id=f"r{i}")


def _key(out: RequestOutput) -> tuple:
    logprobs = [(lp.token_id, round(lp.logprob, 5)) for lp in out.logprobs]
    return (out.req_id, out.token_ids, out.delta_token_ids, out.text, out.delta_text, out.finished,
            out.finish_reason, out.stop_reason, logprobs)  # fmt: skip


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_run_yields_each_step_as_the_step_loop_did(tiny_llama_dir, async_scheduling):
    reference = _engine(tiny_llama_dir, async_scheduling)
    _add_all(reference)
    before: list[list[tuple]] = []
    while reference.has_unfinished_requests():  # the loop `run()` replaced, as it was written
        before.append([_key(out) for out in reference.step()])

    engine = _engine(tiny_llama_dir, async_scheduling)
    _add_all(engine)
    steps, after = [], []
    for step in engine.run():  # keys taken at once: a held output's logprobs list keeps growing
        steps.append(step)
        after.append([_key(out) for out in step.outputs])
    assert after == before
    assert not engine.has_unfinished_requests()
    assert all(0 <= step.seconds == step.end_time - step.start_time for step in steps)
    assert all(a.end_time <= b.start_time for a, b in zip(steps, steps[1:], strict=False))


def test_generate_returns_the_step_loops_final_outputs(tiny_llama_dir):
    reference = _engine(tiny_llama_dir, async_scheduling=False)
    _add_all(reference)
    finals: dict[str, tuple] = {}
    while reference.has_unfinished_requests():
        finals.update({out.req_id: _key(out) for out in reference.step() if out.finished})

    outputs = LLM(str(tiny_llama_dir), **BASE, async_scheduling=False).generate(_prompts(4), _params())
    assert [_key(out)[1:] for out in outputs] == [finals[f"r{i}"][1:] for i in range(4)]


def test_requests_added_while_running_join_the_loop(tiny_llama_dir):
    engine = _engine(tiny_llama_dir, async_scheduling=True)
    first, second = _prompts(2, seed=3)
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    engine.add_request(first, params, req_id="first")
    finished: dict[str, int] = {}
    for i, step in enumerate(engine.run()):
        if i == 1:
            engine.add_request(second, params, req_id="second")
        finished.update({out.req_id: len(out.token_ids) for out in step.outputs if out.finished})
    assert finished == {"first": 6, "second": 6}


def test_leaving_early_leaves_the_rest_for_the_next_run(tiny_llama_dir):
    engine = _engine(tiny_llama_dir, async_scheduling=False)
    _add_all(engine)
    done: list[str] = []
    for i, step in enumerate(engine.run()):
        done += [out.req_id for out in step.outputs if out.finished]
        if i == 2:
            break
    assert engine.has_unfinished_requests() and len(done) < 4
    done += [out.req_id for step in engine.run() for out in step.outputs if out.finished]
    assert sorted(done) == ["r0", "r1", "r2", "r3"]
    assert not engine.has_unfinished_requests()
