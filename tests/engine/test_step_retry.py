"""A failed step fails only its offender: the others are retried one at a time and finish with
the tokens of a clean run; an out-of-memory step is retried with fewer tokens per step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvspill.engine.core import LLMEngine
from kvspill.errors import StepError
from kvspill.sampling_params import SamplingParams

PARAMS = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True, detokenize=False)
PROMPTS = {"a": list(range(3, 40)), "bad": list(range(50, 70)), "c": list(range(100, 160))}


def _engine(model_dir: Path) -> LLMEngine:
    return LLMEngine(
        model=str(model_dir), device="cpu", dtype="float32", max_model_len=256, max_num_batched_tokens=256
    )


def _run(engine: LLMEngine, prompts: dict[str, list[int]]) -> tuple[dict[str, list[int]], list[list[str]]]:
    for req_id, ids in prompts.items():
        engine.add_request(ids, PARAMS, req_id=req_id)
    tokens: dict[str, list[int]] = {}
    failures: list[list[str]] = []
    for _ in range(200):
        if not engine.has_unfinished_requests():
            break
        try:
            outputs = engine.step()
        except StepError as e:  # what a server does: fail those, go on
            failures.append(e.req_ids)
            for req_id in e.req_ids:
                engine.abort_request(req_id)
            continue
        tokens.update({o.req_id: o.token_ids for o in outputs if o.finished})
    return tokens, failures


@pytest.fixture(scope="module")
def clean_tokens(tiny_llama_dir: Path) -> dict[str, list[int]]:
    tokens, failures = _run(_engine(tiny_llama_dir), {k: v for k, v in PROMPTS.items() if k != "bad"})
    assert not failures
    return tokens


def test_only_the_request_that_breaks_a_step_fails(tiny_llama_dir: Path, clean_tokens) -> None:
    engine = _engine(tiny_llama_dir)
    launch = engine.runner.execute_async

    def poisoned(batch):  # type: ignore[no-untyped-def]
        if "bad" in batch.num_scheduled_tokens:
            raise RuntimeError("an illegal memory access (injected)")
        return launch(batch)

    engine.runner.execute_async = poisoned  # type: ignore[method-assign]
    tokens, failures = _run(engine, PROMPTS)
    assert failures == [["bad"]]  # failed alone, once; the others were retried one at a time
    assert tokens == clean_tokens
    assert not engine.scheduler.isolation.suspects


def test_out_of_memory_retries_with_fewer_tokens_per_step(tiny_llama_dir: Path, clean_tokens) -> None:
    engine = _engine(tiny_llama_dir)
    launch = engine.runner.execute_async
    sizes: list[int] = []

    def small_memory(batch):  # type: ignore[no-untyped-def]
        sizes.append(batch.total_num_scheduled_tokens)
        if batch.total_num_scheduled_tokens > 70:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        return launch(batch)

    engine.runner.execute_async = small_memory  # type: ignore[method-assign]
    tokens, failures = _run(engine, {k: v for k, v in PROMPTS.items() if k != "bad"})
    assert not failures and tokens == clean_tokens
    assert sizes[0] == 97 and engine.scheduler.oom_token_cap == 64  # 97 tokens failed: half, at least 64
    assert max(sizes[1:]) <= 64


def test_a_real_out_of_memory_inside_the_forward_is_retried_not_failed(
    tiny_llama_dir: Path, clean_tokens
) -> None:
    """The allocation fails in the middle of the model's forward, after the runner took the step's
    states in: the step is retried with fewer tokens and every request finishes as in a clean run."""
    engine = _engine(tiny_llama_dir)
    forward = engine.runner._forward
    sizes: list[int] = []

    def small_memory(inputs, feed):  # type: ignore[no-untyped-def]
        sizes.append(inputs.num_tokens)
        if inputs.num_tokens > 70:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")
        return forward(inputs, feed)

    engine.runner._forward = small_memory  # type: ignore[method-assign]
    tokens, failures = _run(engine, {k: v for k, v in PROMPTS.items() if k != "bad"})
    assert not failures and tokens == clean_tokens
    assert sizes[0] == 97 and max(sizes[1:]) <= 64
