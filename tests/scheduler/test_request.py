"""Request: token bookkeeping, incremental chained block hashes, statuses and max_tokens."""

from __future__ import annotations

from kvspill.sampling_params import SamplingParams
from kvspill.scheduler.request import (
    FINISH_REASONS,
    Request,
    RequestStatus,
    get_finish_reason,
    hash_block_tokens,
)

BLOCK_SIZE = 4


def make(prompt: list[int], max_tokens: int | None = 16, max_model_len: int = 64) -> Request:
    return Request(
        "r", prompt, SamplingParams(max_tokens=max_tokens), frozenset({2}), 0.0, max_model_len, BLOCK_SIZE
    )


def test_counts_and_all_token_ids() -> None:
    request = make([10, 11, 12])
    assert (request.num_tokens, request.num_prompt_tokens, request.num_output_tokens) == (3, 3, 0)
    request.append_output_token_ids(5)
    request.append_output_token_ids([6, 7])
    assert request.output_token_ids == [5, 6, 7]
    assert request.all_token_ids == [10, 11, 12, 5, 6, 7]
    assert request.num_tokens == 6
    assert request.status == RequestStatus.WAITING and request.num_computed_tokens == 0


def test_block_hashes_are_chained_and_incremental() -> None:
    request = make(list(range(7)))
    h0 = hash_block_tokens(None, [0, 1, 2, 3])
    assert request.block_hashes == [h0]  # the 3-token tail is not a full block
    request.append_output_token_ids(7)
    assert request.block_hashes == [h0, hash_block_tokens(h0, [4, 5, 6, 7])]
    # Same tokens in block 1 after a different block 0: a different hash.
    other = make([9, 1, 2, 3, 4, 5, 6, 7])
    assert other.block_hashes[1] != request.block_hashes[1]
    assert make(list(range(8))).block_hashes == request.block_hashes


def test_statuses_and_finish_reasons() -> None:
    unfinished = (RequestStatus.WAITING, RequestStatus.RUNNING, RequestStatus.PREEMPTED)
    assert not any(s.is_finished() for s in unfinished)
    assert all(RequestStatus.is_finished(s) for s in FINISH_REASONS)
    assert [get_finish_reason(s) for s in FINISH_REASONS] == ["stop", "length", "abort", "error"]
    assert get_finish_reason(RequestStatus.RUNNING) is None
    request = make([1])
    request.status = RequestStatus.FINISHED_LENGTH
    assert request.is_finished and request.finish_reason == "length"


def test_max_tokens_resolution() -> None:
    assert make([1, 2, 3], max_tokens=5).max_tokens == 5
    assert make([1, 2, 3], max_tokens=None, max_model_len=10).max_tokens == 7


def test_block_size_can_be_bound_later() -> None:
    request = Request("r", list(range(9)), SamplingParams(), frozenset(), 0.0, 64)
    assert request.block_size is None and request.block_hashes == []
    request.bind_block_size(BLOCK_SIZE)
    assert request.block_hashes == make(list(range(9))).block_hashes
    request.bind_block_size(BLOCK_SIZE)
    try:
        request.bind_block_size(8)
    except ValueError:
        pass
    else:
        raise AssertionError("a second, different block size must be refused")
