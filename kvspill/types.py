"""The contracts between layers: the only things that cross from one layer to the next.

Request path, one step: the scheduler emits a `ScheduledBatch` (with its `TransferPlan` of
`BlockMove`s), the runner executes it and returns a `StepOutput`, the scheduler turns that into
one `RequestUpdate` per request it changed, and the engine hands callers `RequestOutput`s.
vLLM v1's SchedulerOutput/ModelRunnerOutput split, kept small. Scheduler-side contracts carry
ints, lists and frozen params, never tensors; this module imports no torch.

Elsewhere, by the same rule: the statistics each layer reports (`kvspill/stats.py`, what
`/v1/kv` serves) and what the server needs of an engine (`kvspill/engine/client.py`).
Configuration is not a contract: `config.py` (the engine's), `scheduler/config.py` (the
scheduler's limits), `sampling_params.py` (a request's).

Invariants:
- A request appears in the runner's state from the step it is in `new_reqs` until its id is
  in `finished_req_ids` (finished, aborted or preempted).
- `num_scheduled_tokens[req_id]` tokens starting at that request's `num_computed_tokens` are
  computed this step; the runner samples a token for a request only when the step reaches
  the end of its known tokens (prompt plus outputs so far).
- Block ids index the KV cache's block dimension; the runner never allocates or frees blocks.
- `RequestOutput.text`/`token_ids` are cumulative; `delta_text`/`delta_token_ids` are what this
  step added (what a stream sends). Stop strings are already applied: `text` never contains a
  stop string unless `include_stop_str_in_output`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvspill.sampling_params import SamplingParams

# ---- scheduler -> runner -----------------------------------------------------------------------


@dataclass(frozen=True)
class NewRequestData:
    """A request the runner has not seen (or sees again after preemption)."""

    req_id: str
    prompt_token_ids: list[int]
    # Tokens generated before a preemption; empty for a fresh request. Penalties need to
    # know which tokens are outputs, so they are not merged into the prompt.
    output_token_ids: list[int]
    sampling_params: SamplingParams
    block_ids: list[int]  # the request's whole block table so far (ids within each block's tier)
    num_computed_tokens: int  # tokens whose KV is already in the cache (prefix hits)
    # Tier of each block in `block_ids` (TIER_*); empty means every block is in the gpu tier.
    block_tiers: list[int] = field(default_factory=list)
    # The tokens the KV covers when they are not prompt + outputs: a request whose context was
    # shifted (`ContextShift`) lost a middle part of them. None: prompt_token_ids + output_token_ids.
    context_token_ids: list[int] | None = None


@dataclass(frozen=True)
class CachedRequestData:
    """A request the runner already holds; only what changed since the last step."""

    req_id: str
    new_block_ids: list[int]  # appended to the runner's copy of the block table (always gpu tier)
    num_computed_tokens: int  # before this step


@dataclass(frozen=True)
class ContextShift:
    """A running request's context dropped in the middle (--context-shift,
    scheduler/context_shift.py), applied by the runner before the step that carries it.

    Tokens [num_sink_tokens, num_sink_tokens + num_dropped_tokens) leave the context; the later
    ones move down by num_dropped_tokens positions (a multiple of the block size, so each keeps its
    slot in its block). All blocks are in the gpu tier (context shift refuses cold tiers)."""

    req_id: str
    num_sink_tokens: int  # tokens before the dropped part (whole sink blocks): unchanged
    num_dropped_tokens: int
    block_ids: list[int]  # the request's block table after the shift
    # (source, destination) gpu block ids of the kept blocks after the sinks, in logical order: the
    # keys of their first `num_kv_tokens` tokens turn back by num_dropped_tokens positions from
    # source into destination (equal ids: in place; a block shared with another request is copied)
    rotations: list[tuple[int, int]]
    num_kv_tokens: int  # tokens of the new context whose KV is in the cache (before any recompute)


# KV tiers. A request's logical block i lives in exactly one tier, at a block id of that tier's pool.
TIER_GPU = 0  # the device pool (on a CPU-only machine this "gpu" tier lives on the CPU device)
TIER_CPU = 1  # pinned host memory
TIER_DISK = 2  # a file under --kv-disk-dir (storage/disk_pool.py)
TIER_NAMES = ("gpu", "cpu", "disk")


@dataclass(frozen=True)
class BlockMove:
    """Move one block's bytes (all layers, K and V) from one tier to another.

    `req_id`/`logical_idx` name the request block that moves (the runner updates its copy of
    that request's table); `req_id` is None for a block no running request owns.
    """

    req_id: str | None
    logical_idx: int
    src_tier: int
    src_block_id: int
    dst_tier: int
    dst_block_id: int


@dataclass(frozen=True)
class TransferPlan:
    """Block moves to run before the step's forward, in order (filled by `kv/tiers.py`).

    Invariant: after the moves, every block a request writes this step is in the gpu tier, and
    every block in the cpu or disk tier is full (block_size tokens).
    """

    moves: list[BlockMove] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.moves


@dataclass(frozen=True)
class ScheduledBatch:
    """What the runner computes in one step."""

    new_reqs: list[NewRequestData]
    cached_reqs: list[CachedRequestData]
    num_scheduled_tokens: dict[str, int]  # req_id -> tokens computed this step (>= 1)
    total_num_scheduled_tokens: int
    finished_req_ids: set[str]  # drop these from the runner's state before the step
    transfers: TransferPlan = field(default_factory=TransferPlan)
    # Context shifts of requests the runner holds, applied before `cached_reqs` (their new blocks
    # go after the shifted table) and before the forward
    context_shifts: list[ContextShift] = field(default_factory=list)

    @property
    def num_reqs(self) -> int:
        return len(self.num_scheduled_tokens)

    @property
    def empty(self) -> bool:
        return self.total_num_scheduled_tokens == 0


# ---- runner -> scheduler -----------------------------------------------------------------------


@dataclass(frozen=True)
class TokenLogprobs:
    """Logprob of the sampled token and the top-k alternatives (token_id, logprob), best first.
    `rank`: the token's place in the vocabulary by logprob (1: the most likely), where computed
    (prompt logprobs: vLLM's answer carries it)."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]]
    rank: int | None = None


@dataclass(frozen=True)
class PromptLogprobs:
    """Prompt-token logprobs one step computed for one request (`SamplingParams.prompt_logprobs`).

    `entries[i]` scores prompt token `start + i` given the tokens before it (`token_id` is that
    prompt token); `start >= 1`: the first prompt token has no prefix and no logprob.
    """

    start: int
    entries: list[TokenLogprobs]


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
    # Prompt tokens this step scored, for requests with `prompt_logprobs` (prefill chunks).
    prompt_logprobs: dict[str, PromptLogprobs] = field(default_factory=dict)


# ---- scheduler -> engine -----------------------------------------------------------------------


@dataclass(frozen=True)
class RequestUpdate:
    """What one step did to one request, for the engine to turn into outputs."""

    req_id: str
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None  # "stop", "length", "abort", "error" once finished
    stop_reason: int | None  # the stop token id that ended the request (not eos), if any
    error: str | None = None  # the message, with finish_reason "error"
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache at the first schedule


# ---- engine -> callers (LLM, server) -----------------------------------------------------------


@dataclass
class RequestOutput:
    """One request as of the latest step that changed it (the engine hands out snapshots)."""

    req_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    delta_text: str = ""
    delta_token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprobs] = field(default_factory=list)
    # With `prompt_logprobs`: one entry per prompt token, None for the first (vLLM's shape);
    # complete once the prompt is computed (the first output with a token). None: not asked.
    prompt_logprobs: list[TokenLogprobs | None] | None = None
    finished: bool = False
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    stop_reason: int | str | None = None  # the stop token id or stop string that ended it
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    error: str | None = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids)
