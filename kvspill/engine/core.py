"""The engine: one loop of schedule -> execute -> update, and the text side of requests.

`LLMEngine.step()` reads in three lines: the scheduler decides what to compute (ScheduledBatch),
the runner computes it (StepOutput), the scheduler applies the tokens; then the engine
detokenizes, applies stop strings and returns `RequestOutput`s. The engine is single-threaded;
the server runs it in its own thread.

`LLMEngine.run()` is the one step loop (offline `generate`, warm-up, the benchmarks): it steps
while any request is unfinished and yields each step (`EngineStep`: its outputs and when it ran).
Requests added between yields join the loop; a caller that leaves early leaves the rest queued.
The server keeps its own loop (server/async_engine.py): it also takes arrivals and aborts from
other threads.

Async scheduling (on by default with CUDA, `--async-scheduling`): `step()` schedules and launches
step N+1, then reads step N's tokens and turns them into outputs while the GPU computes N+1, so
the host's share of a step (about 0.3 ms of a 1.5 ms decode step of a 1B model) overlaps the
GPU's instead of adding to it. Outputs come one `step()` call later; a request that stops gets
one extra step whose token is dropped (scheduler module doc).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kvspill.config import EngineConfig, with_attention_mode
from kvspill.engine.checks import check_context_shift, check_prompt, truncate_prompt
from kvspill.engine.itl_budget import itl_budget_for
from kvspill.engine.parallel import TensorParallelGroup
from kvspill.engine.persist import PrefixPersister
from kvspill.engine.phases import StartupPhases
from kvspill.engine.setup import EngineParts, build_engine_parts, uses_async_scheduling
from kvspill.engine.step_budget import StepBudget
from kvspill.engine.step_retry import OomBackoff, retry_failed_step
from kvspill.engine.warmup import warm_up_at_start
from kvspill.errors import (
    DiskTierIOError,
    InvalidParameterError,
    KVCacheBusyError,
    OutOfKVMemoryError,
)
from kvspill.guided.compiler import GuidedCompiler
from kvspill.kv.prefix_control import PrefixControl
from kvspill.prefix_records import LookupResult, OpResult, PrefixInfo
from kvspill.runner.async_output import PendingStepOutput
from kvspill.sampling.token_bans import bad_word_sequences
from kvspill.sampling_params import SamplingParams
from kvspill.scheduler.config import SchedulerConfig
from kvspill.scheduler.context_shift import resolves_on
from kvspill.scheduler.request import Request, RequestStatus, hash_block_tokens
from kvspill.scheduler.request_window import request_window
from kvspill.scheduler.scheduler import Scheduler
from kvspill.stats import KVStats, KVTiers
from kvspill.storage.persist import PersistStore
from kvspill.text.detokenizer import IncrementalDetokenizer, StopChecker
from kvspill.types import PromptLogprobs, RequestOutput, ScheduledBatch

logger = logging.getLogger(__name__)


@dataclass
class _TextState:
    """Engine-side text state of one request."""

    output: RequestOutput
    detokenizer: IncrementalDetokenizer | None  # None: the request asked for token ids only
    stop_checker: StopChecker
    # vLLM's: the eos or stop token id that ends the request is text only with this
    keep_stop_token_text: bool


@dataclass(frozen=True)
class EngineStep:
    """One step of `LLMEngine.run()`: its outputs (none for a prefill chunk, or for async
    scheduling's first step) and when `step()` began and returned (`time.perf_counter()`
    seconds), for the benchmarks that time steps."""

    outputs: list[RequestOutput]
    start_time: float
    end_time: float

    @property
    def seconds(self) -> float:
        return self.end_time - self.start_time


class LLMEngine:
    def __init__(self, config: EngineConfig | None = None, **engine_options: object) -> None:
        self.config = config if config is not None else EngineConfig(**engine_options)  # type: ignore[arg-type]
        self.startup_phases = StartupPhases()
        # --tensor-parallel-size N: this process is rank 0 of N (engine/parallel.py).
        self.parallel = TensorParallelGroup(self.config) if self.config.tensor_parallel_size > 1 else None
        try:
            bundle: EngineParts = (
                build_engine_parts(self.config, self.startup_phases, self.parallel.tp)
                if self.parallel is not None
                else build_engine_parts(self.config, self.startup_phases)
            )
        except BaseException:
            self.close()
            raise
        self._take_parts(bundle)
        try:
            check_context_shift(self.config, bundle.storage.num_cpu_blocks, bundle.storage.num_disk_blocks)
        except BaseException:
            self.close()
            raise
        self.scheduler = self._build_scheduler(bundle)
        self.persister = self._build_persister(bundle)
        self.kv_control = self._build_kv_control()
        self._has_cold_tiers = bool(bundle.storage.num_cpu_blocks or bundle.storage.num_disk_blocks)
        self._max_cold_fraction = 0.0
        self._texts: dict[str, _TextState] = {}
        self._ids = itertools.count()
        self._step_budget: StepBudget | None = None  # limit_step_time
        self._oom = OomBackoff(floor=4 * self.config.block_size, ceiling=self.config.max_num_batched_tokens)
        self._itl_budget = itl_budget_for(
            self.config, bundle.device.type, self.memory_plan, self.runner.mixed_graph_chunk
        )
        if self._itl_budget is not None:
            self.scheduler.prefill_token_cap = self._itl_budget.prefill_cap()
        warm_up_at_start(self, bundle.device.type, self.startup_phases)
        logger.info("%s", self.startup_phases.summary())

    def _take_parts(self, bundle: EngineParts) -> None:
        """Keep what start-up built and resolved."""
        self.bundle = bundle
        # what start-up resolved: `--attention cpu` on a GPU runs through the tiers (config.py)
        self.config = with_attention_mode(self.config, bundle.device.type)
        self.memory_plan = bundle.memory_plan  # the plan that sized the KV tiers (engine/setup.py)
        self.tokenizer = bundle.tokenizer
        self.runner = bundle.runner
        self.max_model_len = bundle.max_model_len
        self.vocab_size = bundle.vocab_size
        self.async_scheduling = uses_async_scheduling(self.config, bundle.device)
        # (batch, its pending output, when it was launched) of the step the GPU is computing
        self._in_flight: tuple[ScheduledBatch, PendingStepOutput, float] | None = None
        self._last_done = 0.0  # when the last step's tokens were read (async step timing)

    def _build_scheduler(self, bundle: EngineParts) -> Scheduler:
        return Scheduler(
            SchedulerConfig(
                max_num_seqs=self.config.max_num_seqs,
                max_num_batched_tokens=self.config.max_num_batched_tokens,
                max_model_len=self.max_model_len,
                block_size=self.config.block_size,
                num_blocks=bundle.num_blocks,
                enable_prefix_caching=self.config.enable_prefix_caching,
                num_cpu_blocks=bundle.storage.num_cpu_blocks,
                num_disk_blocks=bundle.storage.num_disk_blocks,
                num_sink_blocks=self.config.num_sink_blocks,
                hot_window_tokens=self.config.hot_window_tokens,
                async_scheduling=self.async_scheduling,
                prefix_hash_seed=bundle.kv_fingerprint,
                context_shift=self.config.context_shift,
                context_shift_keep=self.config.context_shift_keep,
                context_shift_overlap=self.config.context_shift_overlap,
            )
        )

    def _build_persister(self, bundle: EngineParts) -> PrefixPersister | None:
        """--kv-persist-dir: prefix blocks written to files and found again after a restart; the
        scheduler holds back a request whose prefix blocks are still being read."""
        if self.config.kv_persist_dir is None or not self.config.enable_prefix_caching:
            return None
        store = PersistStore(
            self.config.kv_persist_dir,
            self.config.kv_persist_budget_bytes,
            bundle.kv_fingerprint,
            bundle.storage.layout,
        )
        persister = PrefixPersister(store, self.scheduler.kv_tiers, bundle.storage)
        self.scheduler.admission_hold = persister.holds
        return persister

    def _build_kv_control(self) -> PrefixControl:
        """The `/v1/kv/*` cache operations over the scheduler's tiers (and the persist dir's files)."""
        store = self.persister.store if self.persister is not None else None
        return PrefixControl(
            self.scheduler.kv_tiers,
            self.config.kv_pin_share,
            store.contains if store is not None else None,
            store.remove if store is not None else None,
        )

    # ---- requests ---------------------------------------------------------------------------

    @property
    def guided_compiler(self) -> GuidedCompiler | None:
        """The grammar compiler (thread-safe; None without a tokenizer)."""
        return self.runner.guided

    def encode(self, prompt: str) -> list[int]:
        if self.tokenizer is None:
            raise InvalidParameterError("prompt", "this model has no tokenizer: send token ids")
        return list(self.tokenizer.hf.encode(prompt))

    def prompt_ids(self, prompt: str | list[int], params: SamplingParams) -> list[int]:
        """The token ids a request runs: the prompt encoded, cut to `truncate_prompt_tokens`."""
        token_ids = self.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if params.truncate_prompt_tokens is None:
            return token_ids
        return truncate_prompt(token_ids, params.truncate_prompt_tokens, self.max_model_len)

    @property
    def sampling_defaults(self) -> Mapping[str, float | int]:
        """The model's recommended sampling values (text/sampling_defaults.py); {} without a tokenizer."""
        return self.tokenizer.sampling_defaults if self.tokenizer is not None else {}

    def default_sampling_params(self) -> SamplingParams:
        """SamplingParams() with the model's recommended values, as a request that sets nothing gets them."""
        defaults: dict[str, Any] = dict(self.sampling_defaults)  # SamplingParams field names
        return SamplingParams(**defaults)

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        req_id: str | None = None,
        admission: bool = False,
    ) -> str:
        """Queue a request; returns its id. Raises a KvspillError subclass on bad input; with
        `admission`, also when its KV cannot fit the tiers (see `check_admission`)."""
        params = params or self.default_sampling_params()
        req_id = req_id if req_id is not None else f"req-{next(self._ids)}"
        if req_id in self._texts:
            raise InvalidParameterError("request_id", f"request id {req_id!r} is already in use")
        token_ids = self.prompt_ids(prompt, params)
        prompt_text = prompt if isinstance(prompt, str) and params.truncate_prompt_tokens is None else None
        params = self._tokenize_bad_words(params)
        shifts = resolves_on(params, self.config.context_shift, self._has_cold_tiers)  # or a 400
        check_prompt(token_ids, params, self.vocab_size, self.max_model_len, shifts)
        request_window(params, self.scheduler.config)  # past the engine's window: refused before any state
        self._validate_logits_processing(params)
        if admission:
            self.check_admission(len(token_ids), params)
        request = Request(
            req_id=req_id,
            prompt_token_ids=token_ids,
            sampling_params=params,
            eos_token_ids=self.bundle.eos_token_ids,
            arrival_time=time.monotonic(),
            max_model_len=self.max_model_len,
        )
        detok = None
        if params.detokenize:
            if self.tokenizer is None:
                raise InvalidParameterError(
                    "detokenize", "this model has no tokenizer: send token ids with detokenize=False"
                )
            detok = IncrementalDetokenizer(self.tokenizer, token_ids, params.skip_special_tokens)
        elif params.stop:
            raise InvalidParameterError("stop", "stop strings need detokenize=True")
        output = RequestOutput(req_id=req_id, prompt=prompt_text, prompt_token_ids=token_ids)
        if params.prompt_logprobs is not None:
            output.prompt_logprobs = [None] * len(token_ids)  # filled by prefill steps
        self._texts[req_id] = _TextState(
            output=output,
            detokenizer=detok,
            stop_checker=StopChecker(params.stop, params.include_stop_str_in_output),
            keep_stop_token_text=params.include_stop_str_in_output,
        )
        self.scheduler.add_request(request)
        return req_id

    def _tokenize_bad_words(self, params: SamplingParams) -> SamplingParams:
        """params with `bad_words_token_ids` from its `bad_words` (token_bans.py); needs the tokenizer."""
        if not params.bad_words or params.bad_words_token_ids:
            return params
        if self.tokenizer is None:
            raise InvalidParameterError("bad_words", "this model has no tokenizer: bad_words needs one")
        hf = self.tokenizer.hf
        sequences = bad_word_sequences(
            params.bad_words, lambda text: list(hf.encode(text, add_special_tokens=False))
        )
        return replace(params, bad_words_token_ids=sequences)

    def _validate_logits_processing(self, params: SamplingParams) -> None:
        """logit_bias, stop_token_ids, allowed_token_ids and bad words inside the vocabulary; a guided request's grammar compiles (cached for
        the runner, which makes its matcher from it). A spec that carries its grammar (the
        server compiled it off this thread) is not compiled again."""
        for param, ids in (
            ("logit_bias", (t for t, _ in params.logit_bias)),
            ("stop_token_ids", iter(params.stop_token_ids)),
            ("allowed_token_ids", iter(params.allowed_token_ids or ())),
            ("bad_words", (t for word in params.bad_words_token_ids for t in word)),
        ):
            bad = next((t for t in ids if t >= self.vocab_size), None)
            if bad is not None:
                raise InvalidParameterError(
                    param, f"token id {bad} is outside the model's vocabulary [0, {self.vocab_size})"
                )
        if params.guided is not None:
            if self.runner.guided is None:
                raise InvalidParameterError(
                    params.guided.param, "guided decoding needs a model with a tokenizer"
                )
            if params.guided.compiled is None:
                self.runner.guided.compile(params.guided)

    def kv_capacity_tokens(self) -> int:
        """Tokens of KV all tiers hold together (gpu + cpu + disk; a disk tier out of use counts 0)."""
        tiers = self.scheduler.kv_tiers
        return (
            self.bundle.storage.num_blocks + tiers.cpu.num_blocks + tiers.disk.num_blocks
        ) * self.config.block_size

    @property
    def context_shift(self) -> bool:
        """--context-shift: requests go on past max_model_len unless they say otherwise."""
        return self.config.context_shift

    def kv_tokens_needed(self, num_prompt_tokens: int, params: SamplingParams) -> int:
        """Tokens of KV a request may grow to: prompt + max_tokens (or up to the context length),
        never past the context (a request that shifts it goes on in the same KV)."""
        return min(num_prompt_tokens + (params.max_tokens or self.max_model_len), self.max_model_len)

    def check_admission(self, num_prompt_tokens: int, params: SamplingParams) -> None:
        """The memory plan's admission rule for a server: a request's whole KV (prompt + max_tokens)
        must fit beside what the unfinished requests may grow to. Never fits: OutOfKVMemoryError
        (a client error); no room now: KVCacheBusyError (retry later). Offline `generate` skips
        this and lets the scheduler queue, spill or preempt instead."""
        need = self.kv_tokens_needed(num_prompt_tokens, params)
        capacity = self.kv_capacity_tokens()
        if need > capacity:
            raise OutOfKVMemoryError(
                f"this request needs KV for {need} tokens (prompt {num_prompt_tokens} + max_tokens), but the KV "
                f"tiers hold {capacity} tokens in all: lower max_tokens, or restart with a larger --cpu-kv-budget "
                "or --disk-kv-budget"
            )
        committed = sum(
            min(r.num_prompt_tokens + r.max_tokens, self.max_model_len)
            for r in self.scheduler.requests.values()
            if not r.is_finished
        )
        if committed + need > capacity:
            raise KVCacheBusyError(
                f"the KV tiers are committed to running requests ({committed} of {capacity} tokens); "
                f"this request needs {need}: retry later"
            )

    def abort_request(self, req_id: str) -> None:
        if req_id in self._texts:
            self.scheduler.finish_requests([req_id], RequestStatus.FINISHED_ABORTED)
            self._texts.pop(req_id, None)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    def close(self) -> None:
        """Finish writing prefix blocks to --kv-persist-dir (a no-op without it) and stop the
        tensor-parallel workers (nothing to do with one rank); idempotent."""
        if getattr(self, "persister", None) is not None:  # (close() may run from a failed __init__)
            assert self.persister is not None
            self.persister.after_step()
            self.persister.close()
            self.persister = None
        if self.parallel is not None:
            if getattr(self, "runner", None) is not None:  # (close() may run from a failed __init__)
                self.runner.release_graphs()  # before NCCL's teardown, which waits for them
            self.parallel.close()

    def _launch(self, batch: ScheduledBatch) -> PendingStepOutput:
        if self.parallel is not None:
            self.parallel.send(batch)  # every worker runs the same step (engine/parallel.py)
        return self.runner.execute_async(batch)

    # ---- the loop -----------------------------------------------------------------------------

    def run(self) -> Iterator[EngineStep]:
        """The step loop: step while any request is unfinished, yielding each step. Requests added
        while iterating join it; leaving early (`break`) leaves the unfinished ones queued for the
        next `run()`. A failing step raises out of the iterator, as `step()` does."""
        while self.has_unfinished_requests():
            start_time = time.perf_counter()
            outputs = self.step()
            yield EngineStep(outputs, start_time, time.perf_counter())

    def step(self) -> list[RequestOutput]:
        """One step. A failure while computing raises `StepError` naming the requests it ran (the
        ones in flight with async scheduling too), so a server fails those and no others."""
        if self.persister is not None:
            self.persister.before_schedule(self.scheduler.waiting, idle=not self.scheduler.running)
        batch = self.scheduler.schedule()
        previous = self._in_flight
        started = time.perf_counter()
        try:
            if not self.async_scheduling:
                results = self._complete(batch, self._launch(batch))
                self._note_step_time(batch, time.perf_counter() - started)
                return results
            pending = self._launch(batch)  # launched: the GPU works while we go on
            self._in_flight = (batch, pending, started)
            results = []
            if previous is not None:
                results = self._complete(previous[0], previous[1])
                # The GPU ran it from its launch or the end of the step before, whichever was later.
                done = time.perf_counter()
                self._note_step_time(previous[0], done - max(previous[2], self._last_done))
                self._last_done = done
            if batch.empty:  # nothing launched (it may report failures found while scheduling)
                self._in_flight = None
                results += self._complete(batch, pending)
            return results
        except Exception as e:
            self._in_flight = None
            ran = {*batch.num_scheduled_tokens, *(previous[0].num_scheduled_tokens if previous else ())}
            retry_failed_step(self.scheduler, self._oom, sorted(ran), batch.total_num_scheduled_tokens, e)
            return []

    def limit_step_time(self, target_s: float | None) -> None:
        """Size each step's tokens so that a step takes about `target_s` (None: the configured
        --max-num-batched-tokens): a server checks aborts between steps (`engine/step_budget.py`). Only
        without async scheduling, where a step's time is measured whole."""
        if target_s is None or self.async_scheduling:
            self._step_budget = None
            self.scheduler.step_token_budget = None
            return
        floor = max(4 * self.config.block_size, self.config.max_num_seqs)
        self._step_budget = StepBudget(target_s, floor, self.config.max_num_batched_tokens)
        self.scheduler.step_token_budget = self._step_budget.tokens

    def _note_step_time(self, batch: ScheduledBatch, seconds: float) -> None:
        if self._step_budget is not None:
            self.scheduler.step_token_budget = self._step_budget.observe(
                batch.total_num_scheduled_tokens, seconds
            )
        if self._itl_budget is not None and not batch.empty:
            cap = self._itl_budget.observe_step(batch, seconds, self.scheduler.running)
            self.scheduler.prefill_token_cap = cap

    def _complete(self, batch: ScheduledBatch, pending: PendingStepOutput) -> list[RequestOutput]:
        output = pending.result()
        self.scheduler.oom_token_cap = self._oom.succeeded()
        updates = self.scheduler.update_from_output(batch, output)
        self._note_prompt_logprobs(output.prompt_logprobs)
        if self.persister is not None:
            self.persister.after_step()
        if self._has_cold_tiers:
            self._note_cold_fraction()
        return self._process_updates(updates, output.logprobs)

    def _note_prompt_logprobs(self, chunks: dict[str, PromptLogprobs]) -> None:
        """Write each scored chunk at its prompt positions (a recomputed prompt writes them again)."""
        for req_id, chunk in chunks.items():
            state = self._texts.get(req_id)
            if state is not None and state.output.prompt_logprobs is not None:
                state.output.prompt_logprobs[chunk.start : chunk.start + len(chunk.entries)] = chunk.entries

    def _note_cold_fraction(self) -> None:
        gpu, cpu, disk = self.scheduler.kv_tiers.used_blocks()
        if cpu + disk:
            self._max_cold_fraction = max(self._max_cold_fraction, (cpu + disk) / (gpu + cpu + disk))

    def _process_updates(self, updates: list, logprobs: dict) -> list[RequestOutput]:
        results: list[RequestOutput] = []
        for upd in updates:
            state = self._texts.get(upd.req_id)
            if state is None:
                continue
            out = state.output
            out.delta_token_ids = list(upd.new_token_ids)
            out.token_ids.extend(upd.new_token_ids)
            out.logprobs.extend(logprobs.get(upd.req_id, []))
            out.num_cached_tokens = upd.num_cached_tokens
            text_ids = upd.new_token_ids
            if upd.finish_reason == "stop" and not state.keep_stop_token_text:
                text_ids = text_ids[:-1]  # the scheduler stops only on an eos or stop token id
            delta = state.detokenizer.add(text_ids) if state.detokenizer and text_ids else ""
            emit, matched = state.stop_checker.add(delta)
            if matched is not None and not upd.finished:
                self.scheduler.finish_requests([upd.req_id], RequestStatus.FINISHED_STOPPED)
                out.finished, out.finish_reason, out.stop_reason = True, "stop", matched
            elif upd.finished:
                if matched is None:
                    # An incomplete character held by the detokenizer may still complete a stop string.
                    held = state.detokenizer.flush() if state.detokenizer else ""
                    more, matched = state.stop_checker.add(held)
                    emit += more if matched is not None else more + state.stop_checker.flush()
                out.stop_reason = matched if matched is not None else upd.stop_reason
                out.finished = True
                out.finish_reason = "stop" if matched is not None else upd.finish_reason
                out.error = upd.error
            out.delta_text = emit
            out.text += emit
            # A snapshot: the caller may hold it while later steps update the request.
            # prompt_logprobs is shared: complete before the first output, only rewritten afterwards
            # by a prompt recomputed after preemption (the same values up to rounding).
            results.append(dataclasses.replace(out, token_ids=list(out.token_ids)))
            if out.finished:
                self._texts.pop(upd.req_id, None)
        return results

    # ---- cache management by prefix (KVCacheControl; between steps, on the engine's thread) ----

    def kv_prefixes(self) -> list[PrefixInfo]:
        return self.kv_control.prefixes()

    def kv_lookup(self, token_ids: list[int]) -> LookupResult:
        """How many leading tokens of `token_ids` the tiers hold, hashed as a request of them is."""
        hashes: list[int] = []
        size = self.config.block_size
        for start in range(0, len(token_ids) - size + 1, size):
            parent = hashes[-1] if hashes else self.bundle.kv_fingerprint
            hashes.append(hash_block_tokens(parent, token_ids[start : start + size]))
        return self.kv_control.lookup(len(token_ids), hashes)

    def kv_pin(self, prefix_id: str, tier: str) -> OpResult:
        return self._run_kv_moves(self.kv_control.pin(prefix_id, tier))

    def kv_unpin(self, prefix_id: str, tier: str) -> OpResult:
        return self.kv_control.unpin(prefix_id, tier)

    def kv_move(self, prefix_id: str, tier: str, partial: bool = False) -> OpResult:
        return self._run_kv_moves(self.kv_control.move(prefix_id, tier, partial))

    def kv_clear(self, prefix_id: str | None, persisted: bool = False) -> OpResult:
        if persisted and self.persister is not None:
            self.persister.store.flush()  # a queued write would bring a cleared file back
        return self.kv_control.clear(prefix_id, persisted)

    def _run_kv_moves(self, result: OpResult) -> OpResult:
        """Copy the blocks an operation moved now, in a batch that computes nothing (a step in flight
        ran first: the copies follow it on the device's stream)."""
        batch = self.scheduler.schedule_moves_only()
        if not batch.transfers.empty or batch.finished_req_ids:
            try:
                self._launch(batch).result()
            except DiskTierIOError as e:  # the moves that did not fail stand; the server says 500
                self.kv_control.forget_failed_moves(batch.transfers.moves, e)
                raise
        return result

    def kv_stats(self) -> KVStats:
        """Blocks and bytes per tier, per-request hot/cold split, bytes moved per direction and
        time in cold attention per path: what the server, monitor and benchmarks read."""
        block_bytes = self.bundle.storage.layout.block_bytes
        sched = self.scheduler.stats()
        runner = self.runner.kv_stats()
        return KVStats(
            block_size=self.config.block_size,
            block_bytes=block_bytes,
            tiers=KVTiers.of(sched.kv_tiers, block_bytes),
            requests=self.scheduler.tier_stats(),
            bytes_moved=dict(runner.bytes_moved),
            cold_attention_seconds=runner.cold_attention_seconds,
            max_cold_fraction=self._max_cold_fraction,
            scheduler=sched,
            runner=runner,
        )
