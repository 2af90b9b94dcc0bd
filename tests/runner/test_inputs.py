"""`build_step_inputs`: one step flattened into arrays, asserted element by element.

Blocks of 4 tokens. The runner's per-request state is built from the `ScheduledBatch` as
`ModelRunner._update_states` builds it (`_apply`), and a request the runner already holds is
written out as it stands after its earlier steps. Token ids encode their request: 1xx p1,
2xx d1, 3xx p2, 4xx d2.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvspill.runner.async_output import PLACEHOLDER
from kvspill.runner.inputs import RunnerRequestState, StepInputs, build_step_inputs
from kvspill.sampling.sampler import SamplingState
from kvspill.sampling_params import SamplingParams
from kvspill.types import TIER_CPU, TIER_GPU, CachedRequestData, NewRequestData, ScheduledBatch

BLOCK_SIZE = 4
PARAMS = SamplingParams()


def _held(
    req_id: str, token_ids: list[int], block_ids: list[int], num_computed_tokens: int
) -> RunnerRequestState:
    return RunnerRequestState(
        req_id,
        token_ids,
        block_ids,
        num_computed_tokens,
        SamplingState(PARAMS, token_ids[:num_computed_tokens]),
    )


def _new(
    req_id: str, prompt: list[int], block_ids: list[int], num_computed_tokens: int = 0
) -> NewRequestData:
    return NewRequestData(req_id, prompt, [], PARAMS, block_ids, num_computed_tokens)


def _apply(batch: ScheduledBatch, states: dict[str, RunnerRequestState]) -> None:
    """What `ModelRunner._update_states` does with a batch that moves no blocks between tiers."""
    for req_id in batch.finished_req_ids:
        states.pop(req_id, None)
    for new in batch.new_reqs:
        token_ids = list(new.prompt_token_ids) + list(new.output_token_ids)
        sampling = SamplingState(new.sampling_params, list(new.prompt_token_ids), list(new.output_token_ids))
        states[new.req_id] = RunnerRequestState(
            new.req_id,
            token_ids,
            list(new.block_ids),
            new.num_computed_tokens,
            sampling,
            list(new.block_tiers),
        )
    for cached in batch.cached_reqs:
        states[cached.req_id].append_gpu_blocks(cached.new_block_ids)
        states[cached.req_id].num_computed_tokens = cached.num_computed_tokens


def _batch(
    new_reqs: list[NewRequestData],
    cached_reqs: list[CachedRequestData],
    num_scheduled_tokens: dict[str, int],
    finished: set[str] | None = None,
) -> ScheduledBatch:
    total = sum(num_scheduled_tokens.values())
    return ScheduledBatch(new_reqs, cached_reqs, num_scheduled_tokens, total, finished or set())


def _assert_array(actual: np.ndarray, expected: list[Any], dtype: type) -> None:
    assert actual.dtype == dtype, f"{actual.dtype} != {dtype}"
    np.testing.assert_array_equal(actual, np.array(expected, dtype=dtype))


def _assert_inputs(inputs: StepInputs, **expected: Any) -> None:
    assert inputs.req_ids == expected["req_ids"]
    assert inputs.num_decodes == expected["num_decodes"]
    _assert_array(inputs.input_ids, expected["input_ids"], np.int64)
    _assert_array(inputs.positions, expected["positions"], np.int64)
    _assert_array(inputs.slot_mapping, expected["slot_mapping"], np.int64)
    _assert_array(inputs.query_start_loc, expected["query_start_loc"], np.int32)
    _assert_array(inputs.seq_lens, expected["seq_lens"], np.int32)
    _assert_array(inputs.block_tables, expected["block_tables"], np.int32)
    _assert_array(inputs.gpu_seq_lens, expected["gpu_seq_lens"], np.int32)
    assert inputs.sample_rows == expected["sample_rows"]
    _assert_array(inputs.logits_indices, expected["logits_indices"], np.int64)
    assert inputs.num_tokens == len(expected["input_ids"])


def test_mixed_step_decodes_first_then_the_next_step() -> None:
    states = {
        # d1: 8 prompt tokens computed, its first output (208) sampled; block 9 is new this step.
        "d1": _held("d1", list(range(200, 209)), [5, 2], num_computed_tokens=8),
        # d2 (async scheduling): its last token was sampled by the step still on the device.
        "d2": _held("d2", [400, 401, 402, 403, 404, PLACEHOLDER], [10, 11], num_computed_tokens=5),
    }
    step1 = _batch(
        new_reqs=[
            # p1: a 10-token prompt, first chunk of 6 (blocks for 6 tokens).
            _new("p1", list(range(100, 110)), [3, 7]),
            # p2: resumed with 8 prompt tokens (blocks 4 and 6) served by the prefix cache.
            _new("p2", list(range(300, 311)), [4, 6, 8], num_computed_tokens=8),
        ],
        cached_reqs=[CachedRequestData("d1", [9], 8), CachedRequestData("d2", [], 5)],
        num_scheduled_tokens={"p1": 6, "d1": 1, "p2": 3, "d2": 1},  # the scheduler's order
    )
    _apply(step1, states)
    _assert_inputs(
        build_step_inputs(step1, states, BLOCK_SIZE),
        req_ids=["d1", "d2", "p1", "p2"],
        num_decodes=2,
        input_ids=[208, PLACEHOLDER, 100, 101, 102, 103, 104, 105, 308, 309, 310],
        positions=[8, 5, 0, 1, 2, 3, 4, 5, 8, 9, 10],
        # slot = block_id * 4 + position % 4
        slot_mapping=[9 * 4 + 0, 11 * 4 + 1, 12, 13, 14, 15, 7 * 4 + 0, 29, 8 * 4 + 0, 33, 34],
        query_start_loc=[0, 1, 2, 8, 11],
        seq_lens=[9, 6, 6, 11],
        block_tables=[[5, 2, 9], [10, 11, 0], [3, 7, 0], [4, 6, 8]],
        gpu_seq_lens=[9, 6, 6, 11],
        sample_rows=[0, 1, 3],  # p1's chunk stops short of its prompt's end: no token
        logits_indices=[0, 1, 10],
    )

    # What the runner does after the step: computed tokens advance; sampled tokens are appended.
    for req_id, n in step1.num_scheduled_tokens.items():
        states[req_id].num_computed_tokens += n
    states["d2"].token_ids[-1] = 405
    states["p2"].token_ids.append(311)
    step2 = _batch(
        new_reqs=[],
        cached_reqs=[CachedRequestData("p1", [1], 6), CachedRequestData("p2", [], 11)],
        num_scheduled_tokens={"p1": 4, "p2": 1},  # d2 waits this step; d1 finished
        finished={"d1"},
    )
    _apply(step2, states)
    assert set(states) == {"d2", "p1", "p2"}
    _assert_inputs(
        build_step_inputs(step2, states, BLOCK_SIZE),
        req_ids=["p2", "p1"],
        num_decodes=1,
        input_ids=[311, 106, 107, 108, 109],
        positions=[11, 6, 7, 8, 9],
        slot_mapping=[8 * 4 + 3, 7 * 4 + 2, 31, 1 * 4 + 0, 5],
        query_start_loc=[0, 1, 5],
        seq_lens=[12, 10],
        block_tables=[[4, 6, 8], [3, 7, 1]],
        gpu_seq_lens=[12, 10],
        sample_rows=[0, 1],  # p1's last chunk reaches its prompt's end: it samples
        logits_indices=[0, 4],
    )


def test_a_one_token_prefill_chunk_is_laid_out_as_a_decode() -> None:
    # A prefix hit of 8 of 9 prompt tokens leaves one token to compute: the step treats it as a
    # decode (its query is the last position and sees every key).
    states: dict[str, RunnerRequestState] = {}
    batch = _batch(
        new_reqs=[_new("p", list(range(100, 106)), [1, 2]), _new("h", list(range(300, 309)), [4, 6, 8], 8)],
        cached_reqs=[],
        num_scheduled_tokens={"p": 6, "h": 1},
    )
    _apply(batch, states)
    _assert_inputs(
        build_step_inputs(batch, states, BLOCK_SIZE),
        req_ids=["h", "p"],
        num_decodes=1,
        input_ids=[308, 100, 101, 102, 103, 104, 105],
        positions=[8, 0, 1, 2, 3, 4, 5],
        slot_mapping=[32, 4, 5, 6, 7, 8, 9],
        query_start_loc=[0, 1, 7],
        seq_lens=[9, 6],
        block_tables=[[4, 6, 8], [1, 2, 0]],
        gpu_seq_lens=[9, 6],
        sample_rows=[0, 1],
        logits_indices=[0, 6],
    )


def test_cold_blocks_are_compacted_out_of_the_gpu_table() -> None:
    # c: 10 tokens, its first block in the cpu tier (cpu block 2); decode at position 9.
    states = {
        "c": RunnerRequestState(
            "c",
            list(range(100, 110)),
            [2, 5, 6],
            9,
            SamplingState(PARAMS, list(range(100, 109))),
            block_tiers=[TIER_CPU, TIER_GPU, TIER_GPU],
        )
    }
    batch = _batch([], [CachedRequestData("c", [], 9)], {"c": 1})
    _apply(batch, states)
    inputs = build_step_inputs(batch, states, BLOCK_SIZE)
    _assert_inputs(
        inputs,
        req_ids=["c"],
        num_decodes=1,
        input_ids=[109],
        positions=[9],
        slot_mapping=[6 * 4 + 1],  # logical block 2 is the second gpu block
        query_start_loc=[0, 1],
        seq_lens=[10],
        block_tables=[[5, 6, 0]],
        gpu_seq_lens=[10 - 4],
        sample_rows=[0],
        logits_indices=[0],
    )
    [cold] = inputs.cold_seqs
    assert (cold.token_start, cold.num_tokens) == (0, 1)
    _assert_array(cold.block_tiers, [TIER_CPU], np.int64)
    _assert_array(cold.block_ids, [2], np.int64)
