"""`StepInputs` for tests: a two-request decode step with the given cold sequences (the shape the
cold-graph eligibility checks, `runner/sparse_graphs.eager_reason` and
`runner/stream_graphs.stream_eager_reason`, read; nothing else filled in), and a real step of
requests over random blocks (`step_over_random_blocks`), for the attention backend."""

from __future__ import annotations

import numpy as np
import torch

from kvspill.attention.cold.config import ColdSeq
from kvspill.runner.inputs import RunnerRequestState, StepInputs, build_step_inputs
from kvspill.sampling.sampler import SamplingState
from kvspill.sampling_params import SamplingParams
from kvspill.types import ScheduledBatch


def decode_step_inputs(cold_seqs: list[ColdSeq], num_decodes: int = 2) -> StepInputs:
    z = np.zeros(2, dtype=np.int64)
    return StepInputs(
        req_ids=["a", "b"],
        num_decodes=num_decodes,
        input_ids=z,
        positions=z,
        slot_mapping=z,
        query_start_loc=np.arange(3, dtype=np.int32),
        seq_lens=z.astype(np.int32),
        block_tables=np.zeros((2, 1), dtype=np.int32),
        gpu_seq_lens=z.astype(np.int32),
        cold_seqs=cold_seqs,
    )


def step_over_random_blocks(
    seqs: list[tuple[int, int]], num_blocks: int, block_size: int, g: torch.Generator
) -> StepInputs:
    """One step of requests `seqs` = (num_computed_tokens, num_new_tokens) each, over distinct
    blocks drawn at random from a pool of `num_blocks` (decodes and prefill chunks alike)."""
    states, ids = {}, torch.randperm(num_blocks, generator=g).tolist()
    for i, (computed, new) in enumerate(seqs):
        need = -(-(computed + new) // block_size)
        blocks, ids = ids[:need], ids[need:]
        sampling = SamplingState(params=SamplingParams(), prompt_token_ids=[])
        states[f"r{i}"] = RunnerRequestState(f"r{i}", list(range(computed + new)), blocks, computed, sampling)
    counts = {r: n for r, (_, n) in zip(states, seqs, strict=True)}
    return build_step_inputs(ScheduledBatch([], [], counts, sum(counts.values()), set()), states, block_size)
