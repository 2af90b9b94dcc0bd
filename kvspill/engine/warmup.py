"""Warm-up: throwaway requests before an engine is ready, so the first user request runs as fast
as the rest.

Triton compiles a kernel the first time it meets a new specialization (integer arguments are
specialized by divisibility by 16 and by being 1), and torch's kernels and allocator have their
own first-call costs: on an H200 the first 512-token requests of a fresh `kvspill serve` took
1.6-3.2 s of TTFT against tens of ms steady (issue 20). So start-up runs, once, prompts that
cover what a request meets: a prompt longer than one prefill chunk (the second chunk attends
over the first through the prefix path), lengths off and on a multiple of 16, one sequence
alone and several batched, greedy and seeded random sampling. CUDA graphs were already replayed once
when captured. Cold-tier paths are not warmed: they run only once blocks spill.

Then, on every device, the chat template's opening (its system prompt and the user turn's start,
which every single-turn chat shares) is prefilled into the prefix cache, as the first chat request
would leave it for the next ones. On the CPU that is the whole warm-up (cheap: one prefill of a
few dozen tokens; Triton compiles nothing there): the first chat request after /health turned 200
computed those tokens and the next ones found them cached, 820 against 510 ms of CPU for the
embedded model on a 2-core host (issue 50), and its one prefill also pays the first forward's costs.

Invariants: a warm-up leaves nothing behind but the chat template's opening in the prefix cache:
its requests finish, the prefix cache is reset after the kernel warm-up (its random tokens would
never be hit), and the prefix-cache statistics are as before it. It sees the engine only through
`WarmupEngine` (what it calls), so this module never imports the engine.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from kvspill.config import EngineConfig
from kvspill.engine.phases import StartupPhases
from kvspill.sampling_params import SamplingParams
from kvspill.scheduler.scheduler import Scheduler


class ChatTemplate(Protocol):
    """What priming uses of a tokenizer (`text.tokenizer.TokenizerBundle` is one)."""

    @property
    def chat_template(self) -> str | None: ...
    def apply_chat_template(
        self, messages: Sequence[dict[str, Any]], **template_kwargs: Any
    ) -> list[int]: ...


class WarmupEngine(Protocol):
    """What warm-up uses of an engine (`LLMEngine` is one)."""

    @property
    def config(self) -> EngineConfig: ...
    @property
    def max_model_len(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def scheduler(self) -> Scheduler: ...
    @property
    def tokenizer(self) -> ChatTemplate | None: ...
    def kv_capacity_tokens(self) -> int: ...
    def add_request(self, prompt: list[int], params: SamplingParams, req_id: str) -> str: ...
    def run(self) -> Iterable[object]: ...


logger = logging.getLogger(__name__)

WARMUP_NEW_TOKENS = 3
_OFF_16 = 37  # a length off every power-of-two multiple: the unaligned specializations


def warmup_prompt_lengths(chunk_tokens: int, max_model_len: int, kv_capacity_tokens: int) -> list[int]:
    """Prompt lengths run together: over one chunk (two chunks), a 16-multiple, an unaligned one
    and a short one; each must fit the context with its new tokens, and all of them the KV tiers."""
    room = max_model_len - WARMUP_NEW_TOKENS - 1
    wanted = [chunk_tokens + _OFF_16, 64, 100, 7]
    lengths: list[int] = []
    for n in wanted:
        n = min(n, room)
        if n > 0 and n not in lengths:
            lengths.append(n)
    # Keep only what fits together (with a block of slack each), longest first dropped first.
    while lengths and sum(lengths) + len(lengths) * (WARMUP_NEW_TOKENS + 16) > kv_capacity_tokens:
        lengths.pop(0)
    return lengths


def warmup_single_lengths(chunk_tokens: int, max_model_len: int, kv_capacity_tokens: int) -> list[int]:
    """Prompt lengths run alone: every power of two from 16 up to the chunk, and an unaligned one.
    cuBLAS picks its GEMM kernel by the token count (and CUDA loads a kernel on its first use);
    one sequence alone is its own Triton specialization. Measured on an H100 (W2, 2026-11-26): with
    only 64- and 100-token prompts warmed, a first 512-token request still took 1.6x steady TTFT."""
    room = min(max_model_len - WARMUP_NEW_TOKENS - 1, kv_capacity_tokens - WARMUP_NEW_TOKENS - 16)
    lengths = [n for n in (2**i for i in range(4, 20)) if n <= min(chunk_tokens, room)]
    return lengths + ([100] if 100 <= room else [])


def warm_up_at_start(engine: WarmupEngine, device_type: str, phases: StartupPhases) -> None:
    """What start-up runs before the engine is ready (module docstring): with --kernel-warmup (the
    default on CUDA) the kernel warm-up, then the chat template's opening; without it on the CPU,
    the opening alone; --no-kernel-warmup: nothing."""
    kernels = engine.config.kernel_warmup
    if kernels is False:
        return
    with phases.phase("warm-up"):
        if kernels or device_type == "cuda":
            warm_up(engine)
        prime_chat_prefix(engine)


def warm_up(engine: WarmupEngine) -> int:
    """Run the warm-up requests to completion; returns the number of tokens computed."""
    args = (engine.config.max_num_batched_tokens, engine.max_model_len, engine.kv_capacity_tokens())
    singles, together = warmup_single_lengths(*args), warmup_prompt_lengths(*args)
    for n in singles:
        _run(engine, [n])
    _run(engine, together)
    engine.scheduler.kv_cache_manager.reset_prefix_cache()
    logger.debug("warm-up ran prompts of %s tokens alone, then %s together", singles, together)
    runs = [*singles, *together]
    return sum(runs) + WARMUP_NEW_TOKENS * len(runs)


def _run(engine: WarmupEngine, lengths: list[int]) -> None:
    """Requests of these prompt lengths, together, to completion."""
    vocab = engine.vocab_size
    for i, n in enumerate(lengths):
        # Deterministic ids spread over the vocabulary (no tokenizer needed); no special meaning.
        ids = [(7919 * (i + 1) * (j + 1)) % vocab for j in range(n)]
        sampled = i % 2 == 1  # greedy and seeded random sampling both compile what they use
        params = SamplingParams(
            max_tokens=WARMUP_NEW_TOKENS,
            ignore_eos=True,
            detokenize=False,
            temperature=0.8 if sampled else 0.0,
            top_p=0.9 if sampled else 1.0,
            seed=0 if sampled else None,
        )
        engine.add_request(ids, params, req_id=f"warmup-{len(lengths)}-{i}")
    for _ in engine.run():
        pass  # only the compiles matter, not the tokens


# Single-turn chats whose user messages share no first token: what their renderings share is the
# template's own opening.
_PROBE_MESSAGES = ("Hello", "9 lives", "(x)")


def chat_prefix_ids(tokenizer: ChatTemplate | None) -> list[int]:
    """The token ids every single-turn chat begins with under the model's chat template (its default
    system prompt and the user turn's opening); [] without a template or where it refuses a lone
    user message."""
    if tokenizer is None or tokenizer.chat_template is None:
        return []
    try:
        rendered = [tokenizer.apply_chat_template([{"role": "user", "content": m}]) for m in _PROBE_MESSAGES]
    except Exception as e:  # noqa: BLE001 - a template's own rule (e.g. a system turn first): nothing to prime
        logger.debug("the chat template refused a lone user message (%s): no chat prefix primed", e)
        return []
    shared = 0
    while all(len(ids) > shared for ids in rendered) and len({ids[shared] for ids in rendered}) == 1:
        shared += 1
    return rendered[0][:shared]


def prime_chat_prefix(engine: WarmupEngine) -> int:
    """Prefill the chat template's opening so its full blocks are in the prefix cache; returns the
    tokens computed (0 where nothing would be cached: no template, prefix caching off, an opening
    shorter than a block)."""
    ids = chat_prefix_ids(engine.tokenizer)
    config = engine.config
    room = min(engine.max_model_len, engine.kv_capacity_tokens()) - 1
    if not config.enable_prefix_caching or len(ids) < config.block_size or len(ids) >= room:
        return 0
    params = SamplingParams(max_tokens=1, ignore_eos=True, detokenize=False, temperature=0.0)
    with _statistics_kept(engine):
        engine.add_request(ids, params, req_id="warmup-chat-prefix")
        for _ in engine.run():
            pass
    logger.debug("chat template opening primed: %d tokens", len(ids))
    return len(ids)


@contextmanager
def _statistics_kept(engine: WarmupEngine) -> Iterator[None]:
    """The prefix cache's hit statistics as they were: start-up's own lookups are not traffic."""
    manager = engine.scheduler.kv_cache_manager
    queries, hits = manager.prefix_cache_queries, manager.prefix_cache_hits
    try:
        yield
    finally:
        manager.prefix_cache_queries, manager.prefix_cache_hits = queries, hits
