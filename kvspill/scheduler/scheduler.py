"""The scheduler: one token budget per step, one rule, no phases (vLLM v1 style, pure Python).

Each step, `schedule()` grants every request `min(num_tokens - num_computed_tokens, budget)`
tokens: first the running requests in arrival order (a decode is simply 1 token, the rest of
a prompt is a prefill chunk), then waiting requests first come first served while the budget,
`max_num_seqs` and free blocks allow. Chunked prefill, mixed prefill+decode batches and resumed
requests all fall out of that rule. `update_from_output()` appends sampled tokens, finishes
requests and frees their blocks.

Invariants:
- `num_computed_tokens` advances when a batch is scheduled (as in vLLM v1): after `schedule()`
  it already counts the tokens of that step. The batch's `NewRequestData`/`CachedRequestData`
  carry the value before the step. Full blocks enter the prefix cache only in
  `update_from_output()`, once the runner has written them.
- The engine alternates strictly: `schedule()`, run the batch, `update_from_output()` (even for
  an empty batch: requests failed inside `schedule()` are reported there). With
  `async_scheduling` it runs one step ahead: `schedule()` of step N+1 comes before
  `update_from_output()` of step N. Each request a step samples then gets a placeholder
  (`Request.num_pending_tokens`) that the next `schedule()` may already compute (the runner
  feeds the sampled token on the device) and `update_from_output()` replaces with the token. A
  request whose tokens in flight reach its length limit is not scheduled further; one that
  stops on a token gets at most one extra step, whose token is dropped. A request preempted
  while its token is in flight keeps that token.
- `running` is kept in arrival order (order of `add_request`), so its last element is the most
  recently arrived running request: the one preempted when blocks run out. A preempted request
  goes to the front of `waiting` and is announced in `finished_req_ids` so that the runner drops
  its state. No request is admitted in a step that preempted one.
- KV tiers (`kv/tiers.py`, on with cpu or disk blocks): when gpu blocks run short, eligible ones
  spill to the cold tiers before anything is preempted; a preempted request parks its KV there
  when there is room (keeping its full blocks), else it is recomputed, helped by the prefix cache.
  Each request's blocks are placed by its own window when it asked for one (`request_window.py`:
  at most the scheduler's), else by the scheduler's.
  The step's moves go out as `ScheduledBatch.transfers`; `new_reqs` show the tables after them.
- A request with `prompt_logprobs` never takes prefix-cache hits (each prompt token must be
  computed to be scored); its full blocks still enter the cache for others.
- Admission is FCFS: the head of `waiting` that does not fit stops admission. A request that
  could never fit (more blocks than the whole pool) fails with FINISHED_ERROR instead. A request
  on `admission_hold` (its persisted prefix being read) is passed over and keeps its place.
- A request id lives in `requests` from `add_request` until it finishes; finished requests
  are forgotten (the caller keeps its own reference to the `Request`).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable

from kvspill.errors import ContextLengthExceededError, InvalidParameterError
from kvspill.kv.block_pool import KVBlock, KVCacheManager
from kvspill.kv.tier_spill import KVWindow
from kvspill.kv.tiers import KVTierManager
from kvspill.scheduler.config import SchedulerConfig
from kvspill.scheduler.context_shift import ShiftRefused, resolves_on, shift_context
from kvspill.scheduler.isolation import StepIsolation
from kvspill.scheduler.request import Request, RequestStatus
from kvspill.scheduler.request_window import request_window
from kvspill.stats import RequestTierStats, SchedulerStats
from kvspill.types import (
    CachedRequestData,
    ContextShift,
    NewRequestData,
    RequestUpdate,
    ScheduledBatch,
    StepOutput,
)


class Scheduler:
    """Decides, step by step, which tokens of which requests the runner computes."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.kv_cache_manager = KVCacheManager(
            config.num_blocks, config.block_size, config.enable_prefix_caching
        )
        self.requests: dict[str, Request] = {}
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0
        # A step's token budget below max_num_batched_tokens when set (the engine sizes it by
        # measured step time: engine/step_budget.py); None: max_num_batched_tokens.
        self.step_token_budget: int | None = None
        # While any running request decodes, at most this many prefill tokens per step (the
        # engine sizes it for an ITL target: engine/itl_budget.py); None: no cap.
        self.prefill_token_cap: int | None = None
        self._prefill_left: int | None = None  # this step's prefill tokens still allowed
        # After a failed step its requests run one at a time (isolation.py); after an
        # out-of-memory failure steps also carry at most `oom_token_cap` tokens (the engine's).
        self.isolation = StepIsolation()
        # Waiting requests not to admit yet (their persisted prefix is being read: engine/persist.py).
        self.admission_hold: Callable[[str], bool] | None = None
        self.oom_token_cap: int | None = None
        # Finished, aborted or preempted since the last schedule(): the runner drops them.
        self.finished_req_ids: set[str] = set()
        self._arrival_seq: dict[str, int] = {}
        self._next_arrival_seq = 0
        self._windows: dict[str, KVWindow] = {}  # requests that asked for their own window
        self.kv_tiers = KVTierManager(self.kv_cache_manager, config, self._arrival_seq, self._windows)
        self._pending_updates: list[RequestUpdate] = []  # failures found inside schedule()
        self._context_shifts: list[ContextShift] = []  # done since the last schedule(), for the runner

    # ---- requests in and out -----------------------------------------------------------

    def add_request(self, request: Request) -> None:
        """Queue a new request at the back of `waiting`.

        Raises ContextLengthExceededError when the prompt is longer than max_model_len, and
        InvalidParameterError when it asks for a wider window than the engine's (request_window.py).
        """
        if request.req_id in self.requests:
            raise ValueError(f"request id {request.req_id!r} is already in the scheduler")
        if request.status != RequestStatus.WAITING or request.num_computed_tokens:
            raise ValueError(
                f"request {request.req_id!r} was already scheduled (status {request.status.name})"
            )
        if request.max_model_len != self.config.max_model_len:
            raise ValueError(
                f"request {request.req_id!r} was built for max_model_len={request.max_model_len}, "
                f"the scheduler has {self.config.max_model_len}"
            )
        if request.num_prompt_tokens == 0:
            raise InvalidParameterError("prompt", "the prompt must contain at least one token")
        if request.num_prompt_tokens > self.config.max_model_len:
            raise ContextLengthExceededError(self.config.max_model_len, request.num_prompt_tokens)
        window = request_window(request.sampling_params, self.config)
        request.bind_block_size(self.config.block_size, self.config.prefix_hash_seed)
        request.context_shift = resolves_on(
            request.sampling_params, self.config.context_shift, self.kv_tiers.enabled
        )
        if window is not None:
            self._windows[request.req_id] = window
        self.requests[request.req_id] = request
        self._arrival_seq[request.req_id] = self._next_arrival_seq
        self._next_arrival_seq += 1
        self.waiting.append(request)

    def finish_requests(self, req_ids: str | Iterable[str], status: RequestStatus) -> None:
        """End requests from outside (stop strings, aborts). Unknown or finished ids are ignored."""
        if not status.is_finished():
            raise ValueError(f"finish_requests needs a finished status, got {status.name}")
        if isinstance(req_ids, str):
            req_ids = (req_ids,)
        for req_id in req_ids:
            request = self.requests.get(req_id)
            if request is not None:
                self._finish(request, status)

    def abort_requests(self, req_ids: str | Iterable[str]) -> None:
        self.finish_requests(req_ids, RequestStatus.FINISHED_ABORTED)

    def requeue_failed(self, req_ids: Iterable[str]) -> list[str]:
        """A failed step's requests, to run alone (isolation.py): their KV dropped and uncached,
        back to the front of `waiting` in arrival order. Returns those requeued; the others
        (retried too often already, or ended) are the caller's to fail."""
        requests = [self.requests[r] for r in req_ids if r in self.requests]
        retry = sorted(
            (r for r in requests if self.isolation.may_retry(r.req_id)),
            key=lambda r: self._arrival_seq[r.req_id],
        )
        for request in reversed(retry):
            (self.running if request.status == RequestStatus.RUNNING else self.waiting).remove(request)
            self.kv_tiers.drop_for_retry(request)
            request.num_computed_tokens = 0
            request.num_pending_tokens = 0
            request.status = RequestStatus.PREEMPTED
            self.waiting.appendleft(request)
            self.finished_req_ids.add(request.req_id)  # the runner drops its copy
        self.isolation.add(r.req_id for r in retry)
        return [r.req_id for r in retry]

    # ---- one step ----------------------------------------------------------------------

    def schedule(self) -> ScheduledBatch:
        num_scheduled_tokens: dict[str, int] = {}
        admitted: list[Request] = []
        cached_reqs: list[CachedRequestData] = []
        num_preemptions_before = self.num_preemptions

        decoding = any(r.num_computed_tokens >= r.num_prompt_tokens for r in self.running)
        self._prefill_left = self.prefill_token_cap if decoding else None
        budget = self._schedule_running(num_scheduled_tokens, cached_reqs)
        if self.num_preemptions == num_preemptions_before:
            self._schedule_waiting(num_scheduled_tokens, admitted, budget)
        # Built after every move of the step, so their tables are where the blocks will be.
        new_reqs = [self._new_request_data(request) for request in admitted]
        held_req_ids = {r.req_id for r in self.running}.difference(r.req_id for r in admitted)
        transfers = self.kv_tiers.take_transfer_plan(held_req_ids)

        for req_id, num_tokens in num_scheduled_tokens.items():
            request = self.requests[req_id]
            request.num_computed_tokens += num_tokens
            if (
                self.config.async_scheduling
                and request.num_computed_tokens == request.num_tokens_with_pending
            ):
                request.num_pending_tokens += 1  # this step samples its next token
        finished_req_ids, self.finished_req_ids = self.finished_req_ids, set()
        shifts, self._context_shifts = self._context_shifts, []
        return ScheduledBatch(
            new_reqs=new_reqs,
            cached_reqs=cached_reqs,
            num_scheduled_tokens=num_scheduled_tokens,
            total_num_scheduled_tokens=sum(num_scheduled_tokens.values()),
            finished_req_ids=finished_req_ids,
            transfers=transfers,
            context_shifts=[s for s in shifts if s.req_id in self.requests],
        )

    def schedule_moves_only(self) -> ScheduledBatch:
        """A batch that computes nothing: the block moves recorded since the last `schedule()` (a
        cache operation between steps, `kv/prefix_control.py`; bytes only), and the finished ids."""
        finished_req_ids, self.finished_req_ids = self.finished_req_ids, set()
        transfers = self.kv_tiers.take_transfer_plan(())
        return ScheduledBatch([], [], {}, 0, finished_req_ids, transfers)

    def _schedule_running(
        self, num_scheduled_tokens: dict[str, int], cached_reqs: list[CachedRequestData]
    ) -> int:
        """Grant tokens to running requests in order, preempting from the back. Returns the budget left."""
        budget = min(
            self.step_token_budget or self.config.max_num_batched_tokens,
            self.oom_token_cap or self.config.max_num_batched_tokens,
        )
        reserve = self._waiting_reserve(budget)
        i = 0
        while i < len(self.running) and budget > 0:
            request = self.running[i]
            if self.isolation.holds_back(request.req_id):
                i += 1
                continue
            message = self.kv_tiers.never_fits_message(request, request.num_computed_tokens)
            if message is not None:
                self._fail(request, message)
                continue
            prefilling = request.num_computed_tokens < request.num_prompt_tokens
            limit = max(1, budget - reserve) if prefilling else budget
            num_new_tokens = self._num_new_tokens(request, request.num_computed_tokens, limit)
            if num_new_tokens == 0:  # waiting for its sampled token (schedule() called twice)
                i += 1
                continue
            new_block_ids = self._allocate_or_preempt(request, num_new_tokens)
            if new_block_ids is None:  # it preempted itself: it was the last running request
                break
            cached_reqs.append(CachedRequestData(request.req_id, new_block_ids, request.num_computed_tokens))
            num_scheduled_tokens[request.req_id] = num_new_tokens
            self._charge_prefill(request, request.num_computed_tokens, num_new_tokens)
            budget -= num_new_tokens
            i += 1
        return budget

    def _waiting_reserve(self, budget: int) -> int:
        """Tokens of a time-sized step (a server's: `step_token_budget`) that running prefills leave
        for waiting requests: half, while any request waits and may be admitted. Without it a long
        prefill took every step until done and a 1-token request sent during a 7,000-token CPU
        prefill waited 77 s (issue 48, item 7); with it, it starts within a step or two."""
        if (
            self.step_token_budget is None
            or not self.waiting
            or len(self.running) >= self.config.max_num_seqs
        ):
            return 0
        return budget // 2

    def _allocate_or_preempt(self, request: Request, num_new_tokens: int) -> list[int] | None:
        """Allocate slots (spilling first), preempting the latest arrived running request until they fit.

        Returns None when `request` itself had to be preempted.
        """
        while True:
            new_block_ids = self.kv_tiers.allocate_slots(request, num_new_tokens, reclaim=True)
            if new_block_ids is not None:
                return new_block_ids
            victim = self.running.pop()
            self._preempt(victim)
            if victim is request:
                return None

    def _schedule_waiting(
        self, num_scheduled_tokens: dict[str, int], admitted: list[Request], budget: int
    ) -> None:
        """Admit waiting requests first come first served; the first that does not fit stops it.
        Requests on `admission_hold` are set aside for this step, keeping their places in line."""
        hold = self.admission_hold
        held = [r for r in self.waiting if hold(r.req_id)] if hold is not None else []
        if not held:
            self._admit_waiting(num_scheduled_tokens, admitted, budget)
            return
        place = {r.req_id: i for i, r in enumerate(self.waiting)}
        for request in held:
            self.waiting.remove(request)
        try:
            self._admit_waiting(num_scheduled_tokens, admitted, budget)
        finally:
            in_line = sorted([*self.waiting, *held], key=lambda r: place[r.req_id])
            self.waiting.clear()
            self.waiting.extend(in_line)

    def _admit_waiting(
        self, num_scheduled_tokens: dict[str, int], admitted: list[Request], budget: int
    ) -> None:
        while (
            self.waiting
            and budget > 0
            and len(self.running) < self.config.max_num_seqs
            and self._prefill_left != 0
        ):
            request = self.waiting[0]
            if self.isolation.holds_back(request.req_id):
                break
            computed_blocks: list[KVBlock | None]
            if self.kv_tiers.is_parked(request):  # resume from its parked KV
                computed_blocks, num_computed_tokens = [], request.num_computed_tokens
            elif request.sampling_params.prompt_logprobs is not None:  # every prompt token is scored
                request.num_computed_tokens = 0
                computed_blocks, num_computed_tokens = [], 0
            else:  # fresh, or recompute (a parked request's KV may have been dropped for room)
                request.num_computed_tokens = 0
                computed_blocks, num_computed_tokens = self.kv_tiers.get_computed_blocks(request)
            message = self.kv_tiers.never_fits_message(request, num_computed_tokens)
            if message is not None:
                self._fail(request, message)
                continue
            num_new_tokens = self._num_new_tokens(request, num_computed_tokens, budget)
            if self.kv_tiers.allocate_slots(request, num_new_tokens, computed_blocks) is None:
                break
            self.waiting.popleft()
            if request.status == RequestStatus.WAITING:  # first schedule, not a resume
                request.num_cached_tokens = num_computed_tokens
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_computed_tokens
            bisect.insort(self.running, request, key=lambda r: self._arrival_seq[r.req_id])
            admitted.append(request)
            num_scheduled_tokens[request.req_id] = num_new_tokens
            self._charge_prefill(request, num_computed_tokens, num_new_tokens)
            budget -= num_new_tokens

    def _new_request_data(self, request: Request) -> NewRequestData:
        block_ids, block_tiers = self.kv_tiers.get_block_table(request)
        return NewRequestData(
            req_id=request.req_id,
            prompt_token_ids=list(request.prompt_token_ids),
            output_token_ids=list(request.output_token_ids),
            sampling_params=request.sampling_params,
            block_ids=block_ids,
            num_computed_tokens=request.num_computed_tokens,
            block_tiers=block_tiers,
            context_token_ids=list(request.all_token_ids) if request.num_shifted_tokens else None,
        )

    def _num_new_tokens(self, request: Request, num_computed_tokens: int, budget: int) -> int:
        if request.num_pending_tokens and request.reached_length_limit:
            return 0  # its last token is in flight
        num_new_tokens = request.num_tokens_with_pending - num_computed_tokens
        if self.config.long_prefill_token_threshold > 0:
            num_new_tokens = min(num_new_tokens, self.config.long_prefill_token_threshold)
        if self._prefill_left is not None and num_computed_tokens < request.num_prompt_tokens:
            num_new_tokens = min(num_new_tokens, self._prefill_left)
        # With cold tiers: no more than the request's hot blocks can hold on the whole gpu tier.
        return min(num_new_tokens, budget, self.kv_tiers.max_num_new_tokens(request, num_computed_tokens))

    def _charge_prefill(self, request: Request, num_computed_tokens: int, num_new_tokens: int) -> None:
        if self._prefill_left is not None and num_computed_tokens < request.num_prompt_tokens:
            self._prefill_left = max(0, self._prefill_left - num_new_tokens)

    # ---- after the step ----------------------------------------------------------------

    def update_from_output(self, batch: ScheduledBatch, output: StepOutput) -> list[RequestUpdate]:
        """Apply a step's sampled tokens; finish, free and report requests.

        Returns one update per request that got tokens or finished in this step (including
        requests failed inside the preceding `schedule()`).
        """
        updates, self._pending_updates = self._pending_updates, []
        self.isolation.step_succeeded(r for r in batch.num_scheduled_tokens if r not in output.failed)
        for req_id, message in output.failed.items():
            request = self.requests.get(req_id)
            if request is not None:
                self._finish(request, RequestStatus.FINISHED_ERROR, message)
                updates.append(request.to_update([]))
        for req_id in batch.num_scheduled_tokens:
            request = self.requests.get(req_id)
            if request is None:
                continue  # finished, aborted or failed since the batch was scheduled
            sampled_token_ids = output.sampled_token_ids.get(req_id)
            if request.status != RequestStatus.RUNNING:
                # Preempted by a later schedule() while its token was in flight: keep the token.
                if sampled_token_ids and request.num_pending_tokens:
                    request.num_pending_tokens -= len(sampled_token_ids)
                    new_token_ids = self._append_and_check_stop(request, sampled_token_ids)
                    updates.append(request.to_update(new_token_ids))
                continue
            self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens)
            if sampled_token_ids:
                request.num_pending_tokens = max(request.num_pending_tokens - len(sampled_token_ids), 0)
                new_token_ids = self._append_and_check_stop(request, sampled_token_ids)
                updates.append(request.to_update(new_token_ids))
        return updates

    def _append_and_check_stop(self, request: Request, token_ids: list[int]) -> list[int]:
        new_token_ids: list[int] = []
        for token_id in token_ids:
            request.append_output_token_ids(token_id)
            new_token_ids.append(token_id)
            status = request.stop_status()
            if status is not None:
                self._finish(request, status)
                break
            if request.num_tokens >= self.config.max_model_len:  # a request that shifts its context
                self._shift_context(request)
                if request.is_finished:
                    break
        return new_token_ids

    def _shift_context(self, request: Request) -> None:
        """Drop the middle of its full context (context_shift.py), or end it as without a shift."""
        try:
            shift = shift_context(
                request,
                self.kv_cache_manager,
                self.config.num_sink_blocks,
                self.config.context_shift_keep,
                self.config.context_shift_overlap,
            )
        except ShiftRefused:
            self._finish(request, RequestStatus.FINISHED_LENGTH)
            return
        if shift is not None and request.status == RequestStatus.RUNNING:
            self._context_shifts.append(shift)

    # ---- state changes -----------------------------------------------------------------

    def _preempt(self, request: Request) -> None:
        request.num_computed_tokens = self.kv_tiers.preempt(request)  # kept when parked, else 0
        request.status = RequestStatus.PREEMPTED
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)
        self.finished_req_ids.add(request.req_id)

    def _finish(self, request: Request, status: RequestStatus, error_message: str | None = None) -> None:
        """Remove a request from its queue, free its blocks and forget it."""
        if request.status == RequestStatus.RUNNING:
            self.running.remove(request)
        else:
            self.waiting.remove(request)
        self.kv_tiers.free(request)
        request.status = status
        if error_message is not None:
            request.error_message = error_message
        self.finished_req_ids.add(request.req_id)
        self.isolation.forget(request.req_id)
        del self.requests[request.req_id]
        del self._arrival_seq[request.req_id]
        self._windows.pop(request.req_id, None)

    def _fail(self, request: Request, error_message: str) -> None:
        """Fail a request from inside schedule(); reported by the next update_from_output()."""
        self._finish(request, RequestStatus.FINISHED_ERROR, error_message)
        self._pending_updates.append(request.to_update([]))

    # ---- queries -----------------------------------------------------------------------

    def get_request(self, req_id: str) -> Request | None:
        return self.requests.get(req_id)

    def has_unfinished_requests(self) -> bool:
        """True while requests are queued or running, or failures wait to be reported."""
        return bool(self.requests) or bool(self._pending_updates)

    def get_num_unfinished_requests(self) -> int:
        return len(self.requests)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def stats(self) -> SchedulerStats:
        kv = self.kv_cache_manager
        return SchedulerStats(
            num_running=self.num_running,
            num_waiting=self.num_waiting,
            num_preemptions=self.num_preemptions,
            kv_cache_usage=kv.usage,
            prefix_cache_queries=kv.prefix_cache_queries,
            prefix_cache_hits=kv.prefix_cache_hits,
            prefix_cache_hit_rate=kv.prefix_hit_rate,
            kv_tiers=self.kv_tiers.stats(),
        )

    def tier_stats(self) -> dict[str, RequestTierStats]:
        """Blocks per tier of each running request, then of each preempted one whose KV is parked."""
        parked = [r for r in self.waiting if self.kv_tiers.is_parked(r)]
        return {r.req_id: self.kv_tiers.request_stats(r) for r in [*self.running, *parked]}
