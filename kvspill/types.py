"""Contracts between the scheduler (pure Python) and the model runner (torch).

These dataclasses are the only things that cross that line: ints, lists and frozen params,
never tensors. The scheduler emits a `ScheduledBatch` per step; the runner executes it and
returns a `StepOutput`. vLLM v1's SchedulerOutput/ModelRunnerOutput split, kept small.

Invariants:
- A request appears in the runner's state from the step it is in `new_reqs` until its id is
  in `finished_req_ids` (finished, aborted or preempted).
- `num_scheduled_tokens[req_id]` tokens starting at that request's `num_computed_tokens` are
  computed this step; the runner samples a token for a request only when the step reaches
  the end of its known tokens (prompt plus outputs so far).
- Block ids index the KV cache's block dimension; the runner never allocates or frees blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvspill.sampling_params import SamplingParams


@dataclass(frozen=True)
class NewRequestData:
    """A request the runner has not seen (or sees again after preemption)."""

    req_id: str
    prompt_token_ids: list[int]
    # Tokens generated before a preemption; empty for a fresh request. Penalties need to
    # know which tokens are outputs, so they are not merged into the prompt.
    output_token_ids: list[int]
    sampling_params: SamplingParams
    block_ids: list[int]  # the request's whole block table so far
    num_computed_tokens: int  # tokens whose KV is already in the cache (prefix hits)


@dataclass(frozen=True)
class CachedRequestData:
    """A request the runner already holds; only what changed since the last step."""

    req_id: str
    new_block_ids: list[int]  # appended to the runner's copy of the block table
    num_computed_tokens: int  # before this step


@dataclass(frozen=True)
class TransferPlan:
    """Block moves between tiers to run around a step (filled by the KV tiers; empty for now).

    Each entry is (block_id_src, block_id_dst) within the named tier pair.
    """

    gpu_to_cpu: list[tuple[int, int]] = field(default_factory=list)
    cpu_to_gpu: list[tuple[int, int]] = field(default_factory=list)
    cpu_to_disk: list[tuple[int, int]] = field(default_factory=list)
    disk_to_cpu: list[tuple[int, int]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.gpu_to_cpu or self.cpu_to_gpu or self.cpu_to_disk or self.disk_to_cpu)


@dataclass(frozen=True)
class ScheduledBatch:
    """What the runner computes in one step."""

    new_reqs: list[NewRequestData]
    cached_reqs: list[CachedRequestData]
    num_scheduled_tokens: dict[str, int]  # req_id -> tokens computed this step (>= 1)
    total_num_scheduled_tokens: int
    finished_req_ids: set[str]  # drop these from the runner's state before the step
    transfers: TransferPlan = field(default_factory=TransferPlan)

    @property
    def num_reqs(self) -> int:
        return len(self.num_scheduled_tokens)

    @property
    def empty(self) -> bool:
        return self.total_num_scheduled_tokens == 0


@dataclass(frozen=True)
class TokenLogprobs:
    """Logprob of the sampled token and the top-k alternatives (token_id, logprob), best first."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]]


@dataclass(frozen=True)
class StepOutput:
    """What the runner returns for one step.

    `sampled_token_ids[req_id]` is the list of new tokens (0 or 1 today) for each scheduled
    request; a request in the middle of its prefill gets an empty list.
    """

    sampled_token_ids: dict[str, list[int]]
    logprobs: dict[str, list[TokenLogprobs]] = field(default_factory=dict)
    # Requests whose step failed (e.g. out of memory): req_id -> message. The engine ends them.
    failed: dict[str, str] = field(default_factory=dict)
