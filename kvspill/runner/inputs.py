"""The runner's copy of request state and the flattening of a step into arrays.

The runner keeps, per request it has seen, the tokens (prompt + outputs it sampled), the block
table and the sampling state; the scheduler sends only what changed (`types.py`). A step is
laid out decodes first (one token each), then prefill chunks, so attention can take each part
with its own kernel. Arrays are built with numpy: a 128K-token prefill chunk costs no Python
loop over tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kvspill.sampling.sampler import SamplingState
from kvspill.types import ScheduledBatch


@dataclass
class RunnerRequestState:
    req_id: str
    token_ids: list[int]  # prompt + outputs so far (the runner appends what it samples)
    block_ids: list[int]
    num_computed_tokens: int
    sampling: SamplingState


@dataclass
class StepInputs:
    """One step flattened; decodes first. Host arrays; the runner copies them to the device."""

    req_ids: list[str]  # in step order
    num_decodes: int
    input_ids: np.ndarray  # [num_tokens] int64
    positions: np.ndarray  # [num_tokens] int64
    slot_mapping: np.ndarray  # [num_tokens] int64
    query_start_loc: np.ndarray  # [num_seqs + 1] int32
    seq_lens: np.ndarray  # [num_seqs] int32, context after this step
    block_tables: np.ndarray  # [num_seqs, max_blocks] int32 (0-padded)
    sample_rows: list[int] = field(default_factory=list)  # seq indices that sample this step
    logits_indices: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # token rows

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])


def order_decodes_first(batch: ScheduledBatch) -> list[str]:
    decodes = [r for r, n in batch.num_scheduled_tokens.items() if n == 1]
    others = [r for r, n in batch.num_scheduled_tokens.items() if n != 1]
    return decodes + others


def build_step_inputs(
    batch: ScheduledBatch, states: dict[str, RunnerRequestState], block_size: int
) -> StepInputs:
    req_ids = order_decodes_first(batch)
    counts = np.array([batch.num_scheduled_tokens[r] for r in req_ids], dtype=np.int64)
    starts = np.array([states[r].num_computed_tokens for r in req_ids], dtype=np.int64)
    query_start_loc = np.zeros(len(req_ids) + 1, dtype=np.int32)
    np.cumsum(counts, out=query_start_loc[1:])
    seq_lens = (starts + counts).astype(np.int32)
    max_blocks = max((len(states[r].block_ids) for r in req_ids), default=1)
    block_tables = np.zeros((len(req_ids), max(max_blocks, 1)), dtype=np.int32)

    input_chunks, position_chunks = [], []
    sample_rows: list[int] = []
    for i, r in enumerate(req_ids):
        st = states[r]
        start, n = int(starts[i]), int(counts[i])
        input_chunks.append(np.asarray(st.token_ids[start : start + n], dtype=np.int64))
        position_chunks.append(np.arange(start, start + n, dtype=np.int64))
        block_tables[i, : len(st.block_ids)] = st.block_ids
        if start + n == len(st.token_ids):
            sample_rows.append(i)
    positions = np.concatenate(position_chunks) if position_chunks else np.zeros(0, np.int64)
    input_ids = np.concatenate(input_chunks) if input_chunks else np.zeros(0, np.int64)
    seq_index = np.repeat(np.arange(len(req_ids)), counts)
    slot_mapping = (
        block_tables[seq_index, positions // block_size].astype(np.int64) * block_size
        + positions % block_size
    )
    # A one-token chunk is a decode: its query sits at the last position and sees every key.
    num_decodes = int((counts == 1).sum())
    logits_indices = query_start_loc[1:][sample_rows].astype(np.int64) - 1
    return StepInputs(
        req_ids=req_ids,
        num_decodes=num_decodes,
        input_ids=input_ids,
        positions=positions,
        slot_mapping=slot_mapping,
        query_start_loc=query_start_loc,
        seq_lens=seq_lens,
        block_tables=block_tables,
        sample_rows=sample_rows,
        logits_indices=logits_indices,
    )
