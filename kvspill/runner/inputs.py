"""The runner's copy of request state and the flattening of a step into arrays.

The runner keeps, per request it has seen, the tokens (prompt + outputs it sampled), the block
table and the sampling state; the scheduler sends only what changed (`types.py`). A step is
laid out decodes first (one token each), then prefill chunks, so attention can take each part
with its own kernel. Arrays are built with numpy: a 128K-token prefill chunk costs no Python
loop over tokens.

KV tiers: each request's block table has a tier per block (`block_tiers`). The gpu kernels get
a COMPACTED table: the request's gpu-tier blocks in logical order, and `gpu_seq_lens` =
seq_len - num_cold_blocks * block_size. That is exact because
- K is stored after RoPE: a key's position no longer enters attention, only which keys a
  query sees;
- cold blocks are full and lie before the step's first token (TransferPlan invariant, checked
  here), so every query sees every cold key, and in the compacted sequence the step's tokens
  are still its tail: the kernels' bottom-right causal rule is still right for gpu keys.
The cold blocks of each such sequence go to `attention/cold/dispatch.py` as a `ColdSeq`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kvspill.attention.cold.config import ColdSeq
from kvspill.sampling.sampler import SamplingState
from kvspill.types import TIER_GPU, TIER_NAMES, BlockMove, ScheduledBatch


@dataclass
class RunnerRequestState:
    req_id: str
    token_ids: list[int]  # prompt + outputs so far (the runner appends what it samples)
    block_ids: list[int]  # id of each logical block within its tier
    num_computed_tokens: int
    sampling: SamplingState
    block_tiers: list[int] = field(default_factory=list)  # TIER_* per block; same length as block_ids
    num_cold_blocks: int = 0  # blocks not in the gpu tier (0: the step costs nothing extra)

    def __post_init__(self) -> None:
        if not self.block_tiers:
            self.block_tiers = [TIER_GPU] * len(self.block_ids)
        assert len(self.block_tiers) == len(self.block_ids), (
            f"request {self.req_id}: {len(self.block_tiers)} tiers for {len(self.block_ids)} blocks"
        )
        self.num_cold_blocks = sum(t != TIER_GPU for t in self.block_tiers)

    def append_gpu_blocks(self, block_ids: list[int]) -> None:
        self.block_ids.extend(block_ids)
        self.block_tiers.extend([TIER_GPU] * len(block_ids))


@dataclass
class StepInputs:
    """One step flattened; decodes first. Host arrays; the runner copies them to the device."""

    req_ids: list[str]  # in step order
    num_decodes: int
    input_ids: np.ndarray  # [num_tokens] int64
    positions: np.ndarray  # [num_tokens] int64
    slot_mapping: np.ndarray  # [num_tokens] int64
    query_start_loc: np.ndarray  # [num_seqs + 1] int32
    seq_lens: np.ndarray  # [num_seqs] int32, context after this step (all tiers)
    block_tables: np.ndarray  # [num_seqs, max_blocks] int32 (0-padded): gpu-tier blocks, compacted
    gpu_seq_lens: np.ndarray  # [num_seqs] int32, tokens in those blocks (= seq_lens without cold blocks)
    cold_seqs: list[ColdSeq] = field(default_factory=list)  # sequences with cold blocks, step order
    sample_rows: list[int] = field(default_factory=list)  # seq indices that sample this step
    logits_indices: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # token rows

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])


def order_decodes_first(batch: ScheduledBatch) -> list[str]:
    decodes = [r for r, n in batch.num_scheduled_tokens.items() if n == 1]
    others = [r for r, n in batch.num_scheduled_tokens.items() if n != 1]
    return decodes + others


def apply_block_moves(states: dict[str, RunnerRequestState], moves: list[BlockMove]) -> None:
    """Point each moved request block (req_id, logical_idx) at its new tier and id, in plan order.

    Moves of requests the runner does not hold (or req_id None) only move bytes. A table that
    already shows where a block ends up after the plan (the scheduler sent it after deciding the
    moves) is left as is; any other mismatch is a broken contract and raises.
    """
    final: dict[tuple[str, int], tuple[int, int]] = {}
    for m in moves:
        if m.req_id is not None:
            final[(m.req_id, m.logical_idx)] = (m.dst_tier, m.dst_block_id)
    for m in moves:
        st = states.get(m.req_id) if m.req_id is not None else None
        if st is None:
            continue
        i = m.logical_idx
        current = (st.block_tiers[i], st.block_ids[i])
        if current == (m.src_tier, m.src_block_id):
            st.block_tiers[i], st.block_ids[i] = m.dst_tier, m.dst_block_id
            st.num_cold_blocks += (m.dst_tier != TIER_GPU) - (m.src_tier != TIER_GPU)
        elif current != final[(st.req_id, i)]:
            raise RuntimeError(
                f"block move {m} does not match request {st.req_id}'s block {i}: it is "
                f"{TIER_NAMES[current[0]]} block {current[1]}"
            )


def _fill_block_table(
    st: RunnerRequestState, start: int, block_size: int, row: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Write the request's gpu blocks (compacted) into `row`; return its cold (tiers, ids, logical
    block numbers) or None."""
    if not st.num_cold_blocks:
        row[: len(st.block_ids)] = st.block_ids
        return None
    tiers = np.asarray(st.block_tiers, dtype=np.int64)
    ids = np.asarray(st.block_ids, dtype=np.int64)
    hot = tiers == TIER_GPU
    row[: int(hot.sum())] = ids[hot]
    cold_idx = np.flatnonzero(~hot)
    if (int(cold_idx[-1]) + 1) * block_size > start:
        raise RuntimeError(
            f"request {st.req_id}: block {int(cold_idx[-1])} is in the {TIER_NAMES[int(tiers[cold_idx[-1]])]} "
            f"tier but not before the step's first token {start}: only full blocks before it may be cold"
        )
    return tiers[~hot], ids[~hot], cold_idx


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
    num_cold = np.zeros(len(req_ids), dtype=np.int64)  # cold blocks per seq: all before its tokens

    input_chunks, position_chunks = [], []
    sample_rows: list[int] = []
    cold_seqs: list[ColdSeq] = []
    for i, r in enumerate(req_ids):
        st = states[r]
        start, n = int(starts[i]), int(counts[i])
        input_chunks.append(np.asarray(st.token_ids[start : start + n], dtype=np.int64))
        position_chunks.append(np.arange(start, start + n, dtype=np.int64))
        cold = _fill_block_table(st, start, block_size, block_tables[i])
        if cold is not None:
            num_cold[i] = len(cold[1])
            cold_seqs.append(ColdSeq(int(query_start_loc[i]), n, cold[0], cold[1], cold[2], r))
        if start + n == len(st.token_ids):
            sample_rows.append(i)
    positions = np.concatenate(position_chunks) if position_chunks else np.zeros(0, np.int64)
    input_ids = np.concatenate(input_chunks) if input_chunks else np.zeros(0, np.int64)
    seq_index = np.repeat(np.arange(len(req_ids)), counts)
    # Written tokens are after every cold block: their compacted block index is shifted by it.
    slot_mapping = (
        block_tables[seq_index, positions // block_size - num_cold[seq_index]].astype(np.int64) * block_size
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
        gpu_seq_lens=(seq_lens - num_cold * block_size).astype(np.int32),
        cold_seqs=cold_seqs,
        sample_rows=sample_rows,
        logits_indices=logits_indices,
    )
