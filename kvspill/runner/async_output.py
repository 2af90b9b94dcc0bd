"""Sampled tokens that may still be on the device: the runner's half of async scheduling.

With async scheduling the engine launches step N+1 before it reads step N's tokens (vLLM's
async scheduling, SGLang's overlap scheduler): the host work of one step (scheduling, input
building, detokenization) runs while the GPU computes the previous one. For that the runner
- writes `PLACEHOLDER` into each sampled request's token lists (their lengths stay right, so
  positions, min_tokens and seeded draws count correctly);
- keeps the sampled ids on the device and feeds them as the next step's input ids there
  (`DeviceFeed`): the next step never waits for the host to learn them;
- copies them to pinned host memory behind an event; `PendingStepOutput.result()` waits for that
  event only, writes the values over the placeholders and returns the `StepOutput`.

Invariants:
- A placeholder is only ever a request's last token, and only the one step after it feeds it
  (as a one-token decode): the engine reads step N's result after launching step N+1 and
  before scheduling step N+2.
- Resolution writes into the state objects captured at sampling time: a request dropped or
  re-created since (finished, preempted) is untouched in the runner's current states.
- Device ids of a CUDA-graph step are views of the graph's output buffer: valid until the
  next replay, which is after the next step's feed in stream order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from kvspill.runner.inputs import RunnerRequestState, StepInputs
from kvspill.types import PromptLogprobs, StepOutput, TokenLogprobs

PLACEHOLDER = -1  # a sampled token whose value is still on the device


class SampledTokens:
    """One step's sampled tokens, one per row of `req_ids`, on the device; a host copy in flight."""

    def __init__(
        self, req_ids: list[str], device_ids: torch.Tensor, states: Sequence[RunnerRequestState]
    ) -> None:
        self.req_ids = req_ids
        self.row_of = {r: i for i, r in enumerate(req_ids)}
        self.device_ids = device_ids  # [num_rows] long
        self._slots: list[tuple[RunnerRequestState, int, int]] = []
        for st in states:  # placeholders now, values in resolve()
            self._slots.append((st, len(st.token_ids), len(st.sampling.output_token_ids)))
            st.token_ids.append(PLACEHOLDER)
            st.sampling.output_token_ids.append(PLACEHOLDER)
        self._event: torch.cuda.Event | None = None
        self._host: torch.Tensor | None = None
        if device_ids.is_cuda:
            self._host = torch.empty(device_ids.shape, dtype=torch.long, pin_memory=True)
            self._host.copy_(device_ids, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()
        self._values: list[int] | None = None

    def resolve(self) -> list[int]:
        """The token ids (waiting for the device copy once); fills the placeholders."""
        if self._values is None:
            if self._event is not None and self._host is not None:
                self._event.synchronize()
                values = self._host.tolist()
            else:
                values = self.device_ids.tolist()
            for (st, pos, out_pos), value in zip(self._slots, values, strict=True):
                st.token_ids[pos] = value
                st.sampling.output_token_ids[out_pos] = value
            self._values = values
        return self._values

    @property
    def resolved(self) -> bool:
        return self._values is not None


class PendingStepOutput:
    """A step's output; `result()` waits for its sampled tokens when there are any in flight."""

    def __init__(
        self,
        output: StepOutput | None = None,
        *,
        req_ids: list[str] | None = None,
        sampled: SampledTokens | None = None,
        logprobs: dict[str, list[TokenLogprobs]] | None = None,
        prompt_logprobs: dict[str, PromptLogprobs] | None = None,
    ) -> None:
        assert (output is None) != (sampled is None), "give either a finished output or sampled tokens"
        self._output = output
        self._req_ids = req_ids or []
        self._sampled = sampled
        self._logprobs = logprobs or {}
        self._prompt_logprobs = prompt_logprobs or {}

    def result(self) -> StepOutput:
        if self._output is None:
            assert self._sampled is not None
            values = self._sampled.resolve()
            sampled: dict[str, list[int]] = {r: [] for r in self._req_ids}
            for req_id, value in zip(self._sampled.req_ids, values, strict=True):
                sampled[req_id] = [value]
            self._output = StepOutput(
                sampled_token_ids=sampled, logprobs=self._logprobs, prompt_logprobs=self._prompt_logprobs
            )
        return self._output


class DeviceFeed:
    """Input-id rows to take from the previous step's sampled ids on the device."""

    def __init__(self, dst_rows: list[int], src_rows: list[int], source: torch.Tensor) -> None:
        self.dst_rows = dst_rows
        self.src_rows = src_rows
        self.source = source  # [num_prev_rows] long, the previous step's sampled ids

    def apply(self, input_ids: torch.Tensor) -> None:
        """Write the fed ids into `input_ids` (on the device, in stream order; no host sync)."""
        d0, s0, k = self.dst_rows[0], self.src_rows[0], len(self.dst_rows)
        if self.dst_rows == list(range(d0, d0 + k)) and self.src_rows == list(range(s0, s0 + k)):
            input_ids[d0 : d0 + k].copy_(self.source[s0 : s0 + k])  # steady decode: one copy
            return
        rows = torch.tensor([self.dst_rows, self.src_rows], dtype=torch.long)
        if input_ids.is_cuda:
            rows = rows.pin_memory().to(input_ids.device, non_blocking=True)
        input_ids.index_copy_(0, rows[0], self.source.index_select(0, rows[1]))


def plan_feed(inputs: StepInputs, last: SampledTokens | None) -> DeviceFeed | None:
    """The rows of `inputs` whose input token is a placeholder, fed from `last`; None if none.

    Raises when a placeholder is not a decode row or `last` did not sample its request (a
    broken invariant: the engine must read each step's result before scheduling two more)."""
    rows = np.flatnonzero(inputs.input_ids == PLACEHOLDER)
    if rows.size == 0:
        return None
    dst, src = [], []
    for row in rows.tolist():
        req_id = inputs.req_ids[row] if row < inputs.num_decodes else None
        if req_id is None or last is None or req_id not in last.row_of:
            raise RuntimeError(
                f"input row {row} is a token still in flight that the previous step did not sample"
            )
        dst.append(row)
        src.append(last.row_of[req_id])
    assert last is not None
    return DeviceFeed(dst, src, last.device_ids)
