"""A two-request decode `StepInputs` with the given cold sequences: the shape the cold-graph
eligibility checks (`runner/sparse_graphs.eager_reason`, `runner/stream_graphs.stream_eager_reason`)
read, nothing else filled in."""

from __future__ import annotations

import numpy as np

from kvspill.kv.cold_config import ColdSeq
from kvspill.runner.inputs import StepInputs


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
