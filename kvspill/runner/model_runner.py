"""The model runner: executes a `ScheduledBatch` and returns a `StepOutput`.

Call down, return up: it never touches the scheduler or mutates a scheduler `Request`; it
keeps its own per-request copy (`RunnerRequestState`) updated from the batch's deltas.
Decode-only steps on CUDA replay a captured graph (`cuda_graphs.py`); everything else runs
eagerly. An out-of-memory error inside a step fails the requests of that step (reported in
`StepOutput.failed`) instead of killing the engine.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from kvspill.kv.storage import KVStorage
from kvspill.runner.attention import AttentionMetadata, PagedAttention
from kvspill.runner.cuda_graphs import DecodeGraphs
from kvspill.runner.inputs import RunnerRequestState, StepInputs, build_step_inputs
from kvspill.sampling.sampler import Sampler, SamplingState
from kvspill.types import ScheduledBatch, StepOutput, TokenLogprobs

logger = logging.getLogger(__name__)


class ModelRunner:
    def __init__(
        self,
        model: torch.nn.Module,
        storage: KVStorage,
        *,
        head_dim: int,
        eos_token_ids: frozenset[int],
        seed: int = 0,
        graphs: DecodeGraphs | None = None,
    ) -> None:
        self.model = model
        self.storage = storage
        self.device = storage.device
        self.block_size = storage.layout.block_size
        self.scale = head_dim**-0.5
        self.eos_token_ids = eos_token_ids
        self.states: dict[str, RunnerRequestState] = {}
        self.sampler = Sampler()
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.graphs = graphs

    # ---- state updates -------------------------------------------------------------------

    def _update_states(self, batch: ScheduledBatch) -> None:
        for req_id in batch.finished_req_ids:
            self.states.pop(req_id, None)
        for new in batch.new_reqs:
            params = new.sampling_params
            self.states[new.req_id] = RunnerRequestState(
                req_id=new.req_id,
                token_ids=list(new.prompt_token_ids) + list(new.output_token_ids),
                block_ids=list(new.block_ids),
                num_computed_tokens=new.num_computed_tokens,
                sampling=SamplingState(
                    params=params,
                    prompt_token_ids=list(new.prompt_token_ids),
                    output_token_ids=list(new.output_token_ids),
                    generator=None,  # seeded: the sampler seeds one from params.seed on first draw
                    eos_token_ids=self.eos_token_ids,
                ),
            )
        for cached in batch.cached_reqs:
            st = self.states[cached.req_id]
            st.block_ids.extend(cached.new_block_ids)
            st.num_computed_tokens = cached.num_computed_tokens

    # ---- execution ------------------------------------------------------------------------

    @torch.inference_mode()
    def execute(self, batch: ScheduledBatch) -> StepOutput:
        self._update_states(batch)
        if batch.empty:
            return StepOutput(sampled_token_ids={})
        inputs = build_step_inputs(batch, self.states, self.block_size)
        try:
            logits = self._forward(inputs)
            result = self._sample(inputs, logits)
        except torch.OutOfMemoryError as e:
            logger.error("out of memory in a step of %d requests: %s", len(inputs.req_ids), e)
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            message = f"out of memory while computing this step ({inputs.num_tokens} tokens)"
            return StepOutput(sampled_token_ids={}, failed={r: message for r in inputs.req_ids})
        for req_id, n in batch.num_scheduled_tokens.items():
            self.states[req_id].num_computed_tokens += n
        return result

    def _forward(self, inputs: StepInputs) -> torch.Tensor:
        """Returns logits [num_sampled, vocab] float32 for the rows that sample."""
        if self.graphs is not None and inputs.num_decodes == len(inputs.req_ids):
            graph_logits = self.graphs.run(inputs)
            if graph_logits is not None:
                return graph_logits
        dev = self.device

        def to_dev(a: np.ndarray) -> torch.Tensor:
            t = torch.from_numpy(a)
            return t.to(dev, non_blocking=True) if dev.type == "cuda" else t

        nd = inputs.num_decodes
        token_nd = nd  # decodes contribute one token each
        qsl = inputs.query_start_loc
        meta = AttentionMetadata(
            slot_mapping=to_dev(inputs.slot_mapping),
            num_decodes=nd,
            decode_block_tables=to_dev(inputs.block_tables[:nd]),
            decode_seq_lens=to_dev(inputs.seq_lens[:nd]),
            prefill_block_tables=to_dev(inputs.block_tables[nd:]),
            prefill_query_start_loc=to_dev((qsl[nd:] - token_nd).astype(np.int32)),
            prefill_seq_lens=to_dev(inputs.seq_lens[nd:]),
            prefill_max_query_len=int(np.diff(qsl[nd:]).max()) if len(qsl) > nd + 1 else 0,
        )
        attention = PagedAttention(self.storage, meta, self.scale)
        hidden = self.model(to_dev(inputs.input_ids), to_dev(inputs.positions), attention)
        if not inputs.sample_rows:  # a step of prefill chunks that all stop short of their end
            return hidden.new_empty((0, 0), dtype=torch.float32)
        rows = to_dev(inputs.logits_indices)
        return self.model.compute_logits(hidden[rows])

    def _sample(self, inputs: StepInputs, logits: torch.Tensor) -> StepOutput:
        sampled: dict[str, list[int]] = {r: [] for r in inputs.req_ids}
        logprobs: dict[str, list[TokenLogprobs]] = {}
        if not inputs.sample_rows:
            return StepOutput(sampled_token_ids=sampled)
        # Checked on the CPU only (on CUDA it would cost a sync per step): fp16 is the CPU default.
        if self.device.type == "cpu" and not torch.isfinite(logits).all():
            message = (
                "the model produced non-finite logits: its activations overflow in "
                f"{self.storage.layout.dtype}; restart with --dtype bfloat16 or --dtype float32"
            )
            return StepOutput(sampled_token_ids={}, failed={r: message for r in inputs.req_ids})
        sample_req_ids = [inputs.req_ids[i] for i in inputs.sample_rows]
        states = [self.states[r].sampling for r in sample_req_ids]
        out = self.sampler.sample(logits, states, self.generator)
        for req_id, token_id, lp in zip(sample_req_ids, out.token_ids, out.logprobs, strict=True):
            st = self.states[req_id]
            st.token_ids.append(token_id)
            st.sampling.output_token_ids.append(token_id)
            sampled[req_id] = [token_id]
            if lp is not None:
                logprobs[req_id] = [lp]
        return StepOutput(sampled_token_ids=sampled, logprobs=logprobs)
