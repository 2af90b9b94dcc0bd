"""The plan's step transient is the largest step the scheduler may build (issue 55): it grows
with --max-num-seqs and --max-num-batched-tokens, and under random workloads the scheduler never
builds a step whose transients a fake allocator, sized to that reserve, cannot hold."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from kvspill.plan import DEFAULT_BANDWIDTHS, PlanRequest, make_plan
from kvspill.plan.costs import activation_peak_bytes, cold_staging_bytes
from kvspill.plan.gpu_budget import gguf_graph_scratch_bytes
from kvspill.plan.spec import KNOWN_SHAPES
from kvspill.sampling_params import SamplingParams
from kvspill.scheduler.config import SchedulerConfig
from kvspill.scheduler.request import Request
from kvspill.scheduler.scheduler import Scheduler
from kvspill.types import ScheduledBatch, StepOutput

GiB = 2**30
SPEC = KNOWN_SHAPES["llama-8b"]
BLOCK = 4


def _reserve(tokens: int, seqs: int) -> int:
    request = PlanRequest(
        spec=SPEC, vram_budget_bytes=24 * GiB, context_len=8192, quantization="q4_k_m",
        max_num_batched_tokens=tokens, max_num_seqs=seqs,
    )  # fmt: skip
    return make_plan(request, DEFAULT_BANDWIDTHS).activation_peak_bytes


def test_the_reserve_grows_with_the_step_the_flags_allow() -> None:
    base = _reserve(2048, 64)
    assert _reserve(4096, 64) > base
    assert _reserve(2048, 256) > base  # the sampler's buffers of 256 rows
    assert _reserve(512, 8) < base
    # the engine's measurement replaces the estimate; the cold paths' staging buffers, which the
    # profiled step does not allocate, come beside it
    request = PlanRequest(spec=SPEC, vram_budget_bytes=24 * GiB, context_len=8192)
    measured = make_plan(replace(request, measured_activation_bytes=123 * 2**20), DEFAULT_BANDWIDTHS)
    assert measured.activation_peak_bytes == 123 * 2**20 + cold_staging_bytes(SPEC, 2)


def _transient(tokens: int, seqs: int) -> int:
    """What a step of `tokens` tokens sampling `seqs` rows needs (the plan's own model)."""
    dequant = gguf_graph_scratch_bytes(SPEC, 2) if tokens > 16 else 0
    return activation_peak_bytes(SPEC, tokens, seqs, 2, 2, dequant_bytes=dequant)


class FakeAllocator:
    """Runs a batch only if its transients fit the reserve; samples one token per finished prompt."""

    def __init__(self, reserve: int) -> None:
        self.reserve = reserve
        self.remaining: dict[str, int] = {}  # tokens each request still has to compute
        self.largest = 0

    def execute(self, batch: ScheduledBatch, scheduler: Scheduler) -> StepOutput:
        need = _transient(batch.total_num_scheduled_tokens, len(batch.num_scheduled_tokens))
        self.largest = max(self.largest, need)
        if need > self.reserve:
            raise MemoryError(f"a step of {batch.total_num_scheduled_tokens} tokens needs {need} bytes")
        sampled: dict[str, list[int]] = {}
        for req_id, n in batch.num_scheduled_tokens.items():
            request = scheduler.requests[req_id]
            done = request.num_computed_tokens + n >= request.num_tokens
            sampled[req_id] = [7] if done else []
        return StepOutput(sampled_token_ids=sampled)


@pytest.mark.parametrize("seed", range(4))
def test_random_workloads_never_build_a_step_over_the_reserve(seed: int) -> None:
    config = SchedulerConfig(
        max_num_seqs=8, max_num_batched_tokens=64, max_model_len=256, block_size=BLOCK, num_blocks=160
    )
    reserve = _transient(config.max_num_batched_tokens, config.max_num_seqs)
    scheduler, allocator, rng = Scheduler(config), FakeAllocator(reserve), random.Random(seed)
    added = 0
    for _ in range(2000):
        for _ in range(min(rng.randrange(0, 3), 60 - added)):
            prompt = [rng.randrange(10, 100) for _ in range(rng.randrange(1, 200))]
            params = SamplingParams(max_tokens=rng.randrange(1, 40), ignore_eos=True)
            scheduler.add_request(Request(f"r{added}", prompt, params, frozenset({2}), 0.0, 256, BLOCK))
            added += 1
        if not scheduler.has_unfinished_requests():
            if added >= 60:
                break
            continue
        batch = scheduler.schedule()
        scheduler.update_from_output(batch, allocator.execute(batch, scheduler))
    assert added == 60 and not scheduler.has_unfinished_requests()
    assert 0 < allocator.largest <= reserve
