"""The model runner: executes a `ScheduledBatch` and returns a `StepOutput`.

Call down, return up: it never touches the scheduler or mutates a scheduler `Request`; it
keeps its own per-request copy (`RunnerRequestState`) updated from the batch's deltas.
Decode-only steps on CUDA replay a captured graph (`cuda_graphs.py`) unless a sequence of the
step has cold KV blocks; decode steps of one cold sequence replay the graphs of the kind the
engine chose (`cold_graphs`: `sparse_graphs.py` or `stream_graphs.py`); everything else runs
eagerly. The runner never branches on the cold path: it calls the backend it was given.

KV tiers: the runner keeps each request's block tiers, applies the batch's `BlockMove`s to its
tables, runs the moves' copies (`storage/transfer.py`, before the forward: the compute stream waits
only on them) and hands the step's cold sequences to the attention (`attention/cold/dispatch.py`).
With `--attention cpu` the KV pool lives on the host (`device` is the model's, `storage.device`
the pool's) and attention runs there. An out-of-memory error inside a step propagates: the engine retries the step's requests
with fewer tokens per step (`engine/step_retry.py`). Non-finite logits on the CPU fail the step's
requests (reported in `StepOutput.failed`) instead of killing the engine.

Prompt logprobs (`SamplingParams.prompt_logprobs`): a prefill chunk of such a request scores its
prompt tokens from the step's hidden states (`prompt_logprobs.py`); those steps run eagerly.

Async scheduling: `execute_async` returns as soon as the step is launched; its sampled tokens stay
on the device (`async_output.py`) until the engine asks for the result, after launching the next
step. `execute` is the synchronous form.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kvspill.attention.cold.config import ColdAttentionConfig
from kvspill.attention.cold.dispatch import ColdAttentionBackend
from kvspill.attention.sparse.anchor import AnchorCapture, build_capture
from kvspill.guided.bitmask import GuideState
from kvspill.guided.compiler import GuidedCompiler
from kvspill.model.base import CausalLM
from kvspill.plan.choices import ColdGraphs
from kvspill.runner.async_output import PLACEHOLDER, DeviceFeed, PendingStepOutput, SampledTokens, plan_feed
from kvspill.runner.attention import PagedAttention, build_attention_metadata, to_device
from kvspill.runner.cold_graphs import ColdDecodeGraphs
from kvspill.runner.context_shift import KeyShifter, apply_context_shift, rope_table
from kvspill.runner.cuda_graphs import DecodeGraphs
from kvspill.runner.inputs import RunnerRequestState, StepInputs, apply_block_moves, build_step_inputs
from kvspill.runner.mixed_graphs import MixedGraphs
from kvspill.runner.prompt_logprobs import compute_prompt_logprobs, prompt_logprob_spans, slice_rows
from kvspill.runner.sparse_graphs import SparseDecodeGraphs
from kvspill.runner.stream_graphs import StreamDecodeGraphs
from kvspill.sampling.sampler import Sampler, SamplingState
from kvspill.sampling_params import SamplingParams
from kvspill.stats import RunnerKVStats
from kvspill.storage.storage import KVStorage, TieredKVStorage
from kvspill.storage.transfer import KVTransferEngine
from kvspill.types import ContextShift, PromptLogprobs, ScheduledBatch, StepOutput

# The graphs of each kind of cold decode step (the runner takes the kind the engine chose)
COLD_GRAPHS: dict[ColdGraphs, Callable[[DecodeGraphs, ColdAttentionBackend, float], ColdDecodeGraphs]] = {
    ColdGraphs.STREAM: StreamDecodeGraphs,
    ColdGraphs.SPARSE: SparseDecodeGraphs,
}


class ModelRunner:
    def __init__(
        self,
        model: CausalLM,
        storage: KVStorage,
        *,
        head_dim: int,
        eos_token_ids: frozenset[int],
        seed: int = 0,
        guided: GuidedCompiler | None = None,
        graphs: DecodeGraphs | None = None,
        mixed_graphs: MixedGraphs | None = None,
        device: torch.device | None = None,
        cold_config: ColdAttentionConfig | None = None,
        cold_graphs: ColdGraphs | None = None,
    ) -> None:
        """`device`: the model's (default: the pool's; differs with --attention cpu). A
        `TieredKVStorage` gets a transfer engine and a cold-attention backend (`cold_config`).
        `cold_graphs`: which CUDA graphs replay decode steps of one cold sequence (the engine's
        record, `RuntimeChoices.cold_graphs`: sparse_graphs.py or stream_graphs.py), given
        decode `graphs`; None: those steps run eagerly. `mixed_graphs`: replay decodes beside a
        short prefill chunk (runner/mixed_graphs.py)."""
        self.model = model
        self.storage = storage
        self.device = device if device is not None else storage.device
        self.kv_device = storage.device
        self.transfers: KVTransferEngine | None = None
        self.cold: ColdAttentionBackend | None = None
        if isinstance(storage, TieredKVStorage):
            self.cold = ColdAttentionBackend(storage, cold_config, wait_host=self._wait_host)
            self.transfers = KVTransferEngine(storage, summaries=self.cold.summaries)
        self.block_size = storage.layout.block_size
        self.scale = head_dim**-0.5
        self.eos_token_ids = eos_token_ids
        self.guided = guided  # makes the grammar matchers of guided requests (None: no tokenizer)
        self.states: dict[str, RunnerRequestState] = {}
        self.sampler = Sampler()
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.graphs = graphs
        self.mixed_graphs = mixed_graphs
        self.cold_graphs: ColdDecodeGraphs | None = None
        if graphs is not None and self.cold is not None and cold_graphs is not None:
            self.cold_graphs = COLD_GRAPHS[cold_graphs](graphs, self.cold, self.scale)
        self._last_sampled: SampledTokens | None = None  # the latest step's tokens (feeds the next step)
        # Benchmarks only (`bench/fill_only.py`): prefill chunks store their K/V and skip attention,
        # so a 1M-token context fills in minutes; decode rows attend exactly as ever.
        self.skip_prefill_attention = False
        self._prompt_lps: dict[str, PromptLogprobs] = {}  # the step being launched (set by _forward)
        self._shifts: list[ContextShift] = []  # the step's context shifts of requests held here
        self._shift_keys = KeyShifter(storage, rope_table(model))
        # rows of prompt logprobs scored at a time: fixed by the lm_head's kind and device
        self._prompt_logprob_rows = slice_rows(getattr(model, "lm_head", None), self.device)

    @property
    def sparse_graphs(self) -> SparseDecodeGraphs | None:
        """The sparse decode graphs, when the engine chose them (for tests and stats)."""
        return self.cold_graphs if isinstance(self.cold_graphs, SparseDecodeGraphs) else None

    @property
    def stream_graphs(self) -> StreamDecodeGraphs | None:
        """The stream decode graphs, when the engine chose them (for tests and stats)."""
        return self.cold_graphs if isinstance(self.cold_graphs, StreamDecodeGraphs) else None

    # ---- state updates -------------------------------------------------------------------

    def _update_states(self, batch: ScheduledBatch) -> None:
        for req_id in batch.finished_req_ids:
            self.states.pop(req_id, None)
            if self.cold is not None and self.cold.anchors is not None:
                self.cold.anchors.release(req_id)
        for new in batch.new_reqs:
            params = new.sampling_params
            self.states[new.req_id] = RunnerRequestState(
                req_id=new.req_id,
                token_ids=(
                    list(new.context_token_ids)
                    if new.context_token_ids is not None
                    else list(new.prompt_token_ids) + list(new.output_token_ids)
                ),
                block_ids=list(new.block_ids),
                block_tiers=list(new.block_tiers),
                num_computed_tokens=new.num_computed_tokens,
                sampling=SamplingState(
                    params=params,
                    prompt_token_ids=list(new.prompt_token_ids),
                    output_token_ids=list(new.output_token_ids),
                    generator=None,  # seeded: the sampler seeds one from params.seed on first draw
                    eos_token_ids=self.eos_token_ids,
                    guide=self._new_guide(params),
                ),
            )
        self._shifts = [s for s in batch.context_shifts if s.req_id in self.states]
        for shift in self._shifts:  # before the new blocks of `cached_reqs` go after the table
            apply_context_shift(self.states[shift.req_id], shift)
        for cached in batch.cached_reqs:
            st = self.states[cached.req_id]
            st.append_gpu_blocks(cached.new_block_ids)
            st.num_computed_tokens = cached.num_computed_tokens
        if not batch.transfers.empty:
            apply_block_moves(self.states, batch.transfers.moves)

    def _new_guide(self, params: SamplingParams) -> GuideState | None:
        """A fresh matcher; a resumed request's outputs are replayed into it at its next sample."""
        if params.guided is None:
            return None
        if self.guided is None:
            raise RuntimeError("a guided request reached a runner without a grammar compiler")
        is_json = params.guided.kind in ("json_schema", "json_object")
        return GuideState(
            self.guided.matcher(params.guided),
            self.guided.json_allowed_words if is_json else None,
            stop_token_ids=tuple(self.guided.stop_token_ids),
        )

    def _wait_host(self) -> None:
        if self.transfers is not None:
            self.transfers.wait_host()

    def _run_transfers(self, batch: ScheduledBatch) -> None:
        if batch.transfers.empty:
            return
        if self.transfers is None:
            raise RuntimeError(
                "the batch moves KV blocks between tiers but the runner's storage has no cold tiers"
            )
        self.transfers.execute(batch.transfers)

    def kv_stats(self) -> RunnerKVStats:
        """Bytes moved per direction, copies, cold-attention bytes and seconds per path (totals)."""
        disk = self.storage.disk if isinstance(self.storage, TieredKVStorage) else None
        return RunnerKVStats(
            transfer=self.transfers.counters() if self.transfers is not None else None,
            cold=self.cold.counters() if self.cold is not None else None,
            disk_read_errors=disk.num_read_errors if disk is not None else 0,
            disk_write_errors=disk.num_write_errors if disk is not None else 0,
        )

    # ---- execution ------------------------------------------------------------------------

    @property
    def mixed_graph_chunk(self) -> int:
        """The prefill chunk the mixed-step graphs replay (0: none)."""
        return self.mixed_graphs.shape.chunk if self.mixed_graphs is not None else 0

    def release_graphs(self) -> None:
        """Destroy the decode CUDA graphs (before leaving a tensor-parallel group); steps run eagerly after."""
        if self.cold_graphs is not None:
            self.cold_graphs.release()
            self.cold_graphs = None
        if self.mixed_graphs is not None:
            self.mixed_graphs.release()
            self.mixed_graphs = None
        if self.graphs is not None:
            self.graphs.release()
            self.graphs = None

    def execute(self, batch: ScheduledBatch) -> StepOutput:
        """Run one step and wait for its tokens."""
        return self.execute_async(batch).result()

    @torch.inference_mode()
    def execute_async(self, batch: ScheduledBatch) -> PendingStepOutput:
        """Launch one step; the result's tokens may still be on the device."""
        self._update_states(batch)
        self._run_transfers(batch)
        if self._shifts:  # the kept keys turn before anything reads or writes them
            self._shift_keys.run(self._shifts)
        if batch.empty:
            return PendingStepOutput(StepOutput(sampled_token_ids={}))
        inputs = build_step_inputs(batch, self.states, self.block_size)
        # An error here (out of memory included) propagates: the engine requeues the step's
        # requests (engine/step_retry.py), which drops their states here, and after an out-of-memory
        # error it carries fewer tokens per step.
        feed = plan_feed(inputs, self._last_sampled)
        self._prompt_lps = {}
        logits, greedy_ids = self._forward(inputs, feed)
        result = self._sample(inputs, logits, greedy_ids, self._prompt_lps)
        for req_id, n in batch.num_scheduled_tokens.items():
            self.states[req_id].num_computed_tokens += n
        return result

    def _forward(
        self, inputs: StepInputs, feed: DeviceFeed | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns logits [num_sampled, vocab] float32 for the rows that sample, and their argmax
        when a CUDA graph computed it. Sets `_prompt_lps` to the prompt logprobs the step's chunks
        score (kept out of the return value: tests wrap this method and see two values)."""
        spans = prompt_logprob_spans(inputs, self.states)
        capture = self._anchor_capture(inputs)
        graph_out = None
        if (
            self.graphs is not None
            and inputs.num_decodes == len(inputs.req_ids)
            and not spans
            and capture is None
        ):
            if not inputs.cold_seqs:
                graph_out = self.graphs.run(inputs, feed)
            elif self.cold_graphs is not None:
                graph_out = self.cold_graphs.run(inputs, feed)
        elif (
            self.mixed_graphs is not None
            and not spans
            and capture is None
            and not self.skip_prefill_attention
        ):
            graph_out = self.mixed_graphs.run(inputs, feed)
        if graph_out is not None:
            return graph_out
        cold = None
        cold_seqs = inputs.cold_seqs
        if self.skip_prefill_attention:
            cold_seqs = [s for s in cold_seqs if s.num_tokens == 1]
        if cold_seqs:
            if self.cold is None:
                raise RuntimeError("a request has cold KV blocks but the runner's storage has no cold tiers")
            cold = self.cold.for_step(cold_seqs, self.scale)
        meta = build_attention_metadata(inputs, self.kv_device, cold, capture)
        meta.skip_prefill_attention = self.skip_prefill_attention
        attention = PagedAttention(self.storage, meta, self.scale)
        input_ids = to_device(inputs.input_ids, self.device)
        if feed is not None:
            feed.apply(input_ids)
        hidden = self.model(input_ids, to_device(inputs.positions, self.device), attention)
        self._prompt_lps = compute_prompt_logprobs(
            hidden,
            spans,
            self.states,
            self.model.compute_logits,
            self._prompt_logprob_rows,
        )
        if not inputs.sample_rows:  # a step of prefill chunks that all stop short of their end
            return hidden.new_empty((0, 0), dtype=torch.float32), None
        rows = to_device(inputs.logits_indices, self.device)
        return self.model.compute_logits(hidden[rows]), None

    def _anchor_capture(self, inputs: StepInputs) -> AnchorCapture | None:
        """Sparse with prompt anchors: the step's rows among its prompts' last tokens (`attention/sparse/anchor.py`)."""
        anchors = self.cold.anchors if self.cold is not None else None
        if anchors is None:
            return None
        qsl = inputs.query_start_loc
        chunks = []
        for i, req_id in enumerate(inputs.req_ids):  # a prompt's last token may come alone, as a "decode"
            st = self.states[req_id]
            prompt_len = len(st.sampling.prompt_token_ids)
            if st.num_computed_tokens < prompt_len:
                chunks.append(
                    (req_id, prompt_len, st.num_computed_tokens, int(qsl[i + 1] - qsl[i]), int(qsl[i]))
                )
        return build_capture(anchors, chunks, self.kv_device) if chunks else None

    def _sample(
        self,
        inputs: StepInputs,
        logits: torch.Tensor,
        greedy_ids: torch.Tensor | None,
        prompt_lps: dict[str, PromptLogprobs],
    ) -> PendingStepOutput:
        if not inputs.sample_rows:
            return PendingStepOutput(
                StepOutput(sampled_token_ids={r: [] for r in inputs.req_ids}, prompt_logprobs=prompt_lps)
            )
        # Checked on the CPU only (on CUDA it would cost a sync per step): fp16 is the CPU default.
        if self.device.type == "cpu" and not torch.isfinite(logits).all():
            message = _non_finite_message(self.storage.layout.dtype)
            return PendingStepOutput(
                StepOutput(sampled_token_ids={}, failed={r: message for r in inputs.req_ids})
            )
        sample_req_ids = [inputs.req_ids[i] for i in inputs.sample_rows]
        states = [self.states[r] for r in sample_req_ids]
        sampling = [st.sampling for st in states]
        if self._last_sampled is not None and any(
            (s.params.reads_output_values or s.guide is not None) and PLACEHOLDER in s.output_token_ids[-1:]
            for s in sampling
        ):
            # Penalties count the values of earlier outputs, bad words compare them; a grammar matcher must accept them. This
            # runs after this step's forward was launched: the GPU computes it while the host waits
            # for the previous step's tokens (already computed before it, in stream order) and then
            # builds the grammar bitmask (guided/bitmask.py).
            self._last_sampled.resolve()
        token_ids, lps = self.sampler.sample_tensor(logits, sampling, self.generator, greedy_ids)
        logprobs = {r: [lp] for r, lp in zip(sample_req_ids, lps, strict=True) if lp is not None}
        self._last_sampled = SampledTokens(sample_req_ids, token_ids, states)
        return PendingStepOutput(
            req_ids=inputs.req_ids, sampled=self._last_sampled, logprobs=logprobs, prompt_logprobs=prompt_lps
        )


def _non_finite_message(dtype: torch.dtype) -> str:
    """What to do about NaN or inf logits: a wider dtype, unless float32 holds them already (then
    the weights themselves hold NaN or inf)."""
    if dtype == torch.float32:
        return (
            "the model produced non-finite logits in float32: its weights hold NaN or inf values, "
            "or overflow even float32; check the checkpoint (download it again)"
        )
    return (
        f"the model produced non-finite logits: its activations overflow in {dtype}; "
        "restart with --dtype bfloat16 or --dtype float32"
    )
