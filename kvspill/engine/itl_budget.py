"""ITL-aware chunked prefill: while requests are decoding, cap each step's prefill tokens so the
step (and so every decoding request's inter-token latency) stays near a target (pure Python).

Why: a step computes the decodes and a prefill chunk together; with `--max-num-batched-tokens
4096` and three 32K prompts arriving beside 8 chats (W2, H200), the chats' ITL p99 was 104 ms
against a p50 of 3.4 ms: every step that carried a 4K-token chunk was a 100 ms gap in their
streams. vLLM users tune the chunk size by hand; here the engine sizes it each step.

The model of a step: `seconds = base + n * (per_token + per_token_context * context)` for n
prefill tokens `context` tokens into their prompt, where `base` is a decode-only step (weights
read once, the decodes' attention) and the rest is what each prefill token adds: its matmuls and
its attention over the context (why a 32K prompt's last chunks cost several times its first).
They start from the memory plan's step-time model (`plan.decode.total_s`, TTFT / context) and
follow measurement (an exponential average; least squares with forgetting for the two slopes).
The cap is `(target - base) / slope(context)` for the furthest prompt's next chunk, clamped to
[floor, ceiling]: the floor keeps prompts progressing when
the target cannot be met (TTFT would otherwise be unbounded), the ceiling is
--max-num-batched-tokens. Steps with no decoding request are not capped (nobody waits on them).

`--target-itl-ms` sets the target; unset, it is AUTO_FACTOR x the measured decode-only step
(at least AUTO_MIN_S): a prefill chunk may stretch a decode step by that factor, no more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvspill.plan.choices import prefill_floor_tokens

if TYPE_CHECKING:
    from collections.abc import Iterable

    from kvspill.config import EngineConfig
    from kvspill.plan import MemoryPlan
    from kvspill.scheduler.request import Request
    from kvspill.types import ScheduledBatch

SMOOTHING = 0.3  # weight of the newest measurement
AUTO_FACTOR = 2.5
AUTO_MIN_S = 0.010


class ItlBudget:
    def __init__(
        self,
        target_s: float | None,
        floor: int,
        ceiling: int,
        base_s: float | None = None,
        seconds_per_token: float | None = None,
    ) -> None:
        """`target_s` None: automatic (module doc). `base_s` / `seconds_per_token`: the plan's
        prediction of a decode-only step and of one prefill token, until measured."""
        self.target_s_given = target_s
        self.floor = max(1, min(floor, ceiling))
        self.ceiling = ceiling
        self.base_s = base_s
        # A step with a prefill chunk costs, beyond a decode-only step, `mixed_overhead` (it runs
        # eagerly, without the decode CUDA graphs) plus per token `per_token` (its matmuls) and
        # `per_token_context * context` (its attention over the tokens before it: why a 32K
        # prompt's last chunks cost several times its first). Least squares with forgetting.
        self.mixed_overhead = 0.0
        self.per_token = seconds_per_token
        self.per_token_context = 0.0
        self._xtx = [[0.0] * 3 for _ in range(3)]
        self._xty = [0.0] * 3

    @property
    def target_s(self) -> float | None:
        if self.target_s_given is not None:
            return self.target_s_given
        if self.base_s is None:
            return None
        return max(AUTO_FACTOR * self.base_s, AUTO_MIN_S)

    def seconds_per_token(self, context: int) -> float | None:
        if self.per_token is None:
            return None
        return self.per_token + self.per_token_context * context

    def prefill_cap(self, context: int = 0) -> int:
        """Prefill tokens a step may carry while requests decode, for a prompt `context` tokens in."""
        target, slope = self.target_s, self.seconds_per_token(context)
        if target is None or slope is None or slope <= 0:
            return self.floor  # nothing known yet: a small chunk, which measures the slope
        room = target - (self.base_s or 0.0) - self.mixed_overhead
        return max(self.floor, min(self.ceiling, int(room / slope)))

    def observe_step(self, batch: ScheduledBatch, seconds: float, running: Iterable[Request]) -> int:
        """Learn from one finished step and return the next step's prefill cap, sized for the
        furthest prompt among `running` (its next chunk attends over the most)."""
        # A decoding request schedules one token; more is a prefill chunk, which attends over
        # the tokens its request computed before it (its context).
        contexts = {r.req_id: r.num_computed_tokens for r in batch.new_reqs}
        contexts.update((r.req_id, r.num_computed_tokens) for r in batch.cached_reqs)
        chunks = [(n, contexts.get(rid, 0)) for rid, n in batch.num_scheduled_tokens.items() if n > 1]
        prefill = sum(n for n, _ in chunks)
        self.observe(prefill, seconds, sum(n * c for n, c in chunks) / prefill if prefill else 0.0)
        upcoming = [r.num_computed_tokens for r in running if r.num_computed_tokens < r.num_prompt_tokens]
        return self.prefill_cap(max(upcoming, default=0))

    def observe(self, prefill_tokens: int, seconds: float, context: float = 0.0) -> None:
        """One finished step: its prefill tokens, their mean context, and how long it took."""
        if seconds <= 0:
            return
        if prefill_tokens == 0:
            self.base_s = _average(self.base_s, seconds)
            return
        if self.base_s is None:
            return
        extra = seconds - self.base_s
        x = (1.0, float(prefill_tokens), prefill_tokens * context)
        keep = 1.0 - SMOOTHING
        for i in range(3):
            self._xty[i] = keep * self._xty[i] + x[i] * extra
            for j in range(3):
                self._xtx[i][j] = keep * self._xtx[i][j] + x[i] * x[j]
        self._fit()

    def _fit(self) -> None:
        """The three terms where the steps seen determine them (all >= 0), else fewer terms."""
        for terms in ((0, 1, 2), (0, 1), (1,)):
            coef = _solve([[self._xtx[i][j] for j in terms] for i in terms], [self._xty[i] for i in terms])
            if coef is not None and all(c >= 0 for c in coef):
                values = dict(zip(terms, coef, strict=True))
                self.mixed_overhead = values.get(0, 0.0)
                self.per_token = values.get(1, self.per_token)
                self.per_token_context = values.get(2, 0.0)
                return


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """x with a x = b (Gaussian elimination, partial pivoting); None when a is near singular."""
    n = len(b)
    m = [[*row, rhs] for row, rhs in zip(a, b, strict=True)]
    scale = max((abs(v) for row in a for v in row), default=0.0)
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) <= 1e-12 * scale:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [v - f * w for v, w in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def _average(old: float | None, new: float) -> float:
    return new if old is None else SMOOTHING * new + (1 - SMOOTHING) * old


def itl_budget_for(
    config: EngineConfig, device_type: str, plan: MemoryPlan | None, mixed_graph_chunk: int = 0
) -> ItlBudget | None:
    """The engine's budget from `--target-itl-ms`: unset, on with CUDA (automatic target) and off
    on the CPU (measured step times vary there, so chunking would too); 0: off.

    `mixed_graph_chunk`: the prefill chunk mixed-step CUDA graphs replay (0: none). With them and
    the automatic target, the cap is that chunk (its prompts' floor): such a step costs its GPU
    time, a longer chunk runs eagerly at several times the cost (runner/mixed_graphs.py), so no
    learned cap would beat it."""
    target_ms = config.target_itl_ms
    if target_ms == 0 or (target_ms is None and device_type != "cuda"):
        return None
    floor = prefill_floor_tokens(config.block_size)
    if target_ms is None and mixed_graph_chunk:
        chunk = min(mixed_graph_chunk, config.max_num_batched_tokens)
        return ItlBudget(None, chunk, chunk)
    base_s = seconds_per_token = None
    if plan is not None and plan.fits and plan.context_len > 0:  # the plan's step-time model
        base_s = plan.decode.total_s
        seconds_per_token = plan.ttft_s / plan.context_len
    return ItlBudget(
        None if target_ms is None else target_ms / 1e3,
        floor,
        config.max_num_batched_tokens,
        base_s,
        seconds_per_token,
    )
