"""Prompt logprobs are scored a slice of rows at a time; a GGUF lm_head on a GPU takes slices of
MAX_GEMV_TOKENS rows, so it never dequantizes its whole weight into a temporary the memory plan
does not hold (an eval's reference engine failed on SmolLM2's 108 MiB fp32 lm_head, H200,
2026-11-28). The slice size must not change a single figure."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from kvspill.kernels.gguf_formats import QuantizedWeight
from kvspill.kernels.gguf_gemv import MAX_GEMV_TOKENS
from kvspill.model.quant import QuantEmbedding
from kvspill.runner.prompt_logprobs import SLICE_ROWS, compute_prompt_logprobs, slice_rows


def test_a_gguf_lm_head_on_a_gpu_takes_gemv_sized_slices() -> None:
    head = QuantEmbedding(320, 64, torch.float32)
    head.set_weight(QuantizedWeight(torch.zeros(320, 2 * 34, dtype=torch.uint8), "Q8_0", 320, 64))
    assert slice_rows(head, torch.device("cuda")) == MAX_GEMV_TOKENS
    assert slice_rows(head, torch.device("cpu")) == SLICE_ROWS  # the CPU path holds no budget
    assert slice_rows(nn.Linear(64, 320, bias=False), torch.device("cuda")) == SLICE_ROWS


def test_the_plan_counts_the_runners_slice() -> None:
    from kvspill.plan.costs import PROMPT_LOGPROB_ROWS

    assert PROMPT_LOGPROB_ROWS == SLICE_ROWS


def test_the_slice_size_changes_no_logprob() -> None:
    torch.manual_seed(0)
    vocab, hidden_size, n = 50, 16, 700
    weight = torch.randn(vocab, hidden_size)
    hidden = torch.randn(n, hidden_size)
    prompt = torch.randint(0, vocab, (n + 1,)).tolist()
    states = {
        "r": SimpleNamespace(
            sampling=SimpleNamespace(prompt_token_ids=prompt, params=SimpleNamespace(prompt_logprobs=3))
        )
    }
    spans = [("r", 0, 1, n)]

    def logits(h: torch.Tensor) -> torch.Tensor:
        return (h @ weight.t()).float()

    by_slice = {
        rows: compute_prompt_logprobs(hidden, spans, states, logits, rows)["r"] for rows in (1, 16, 256, n)
    }
    first = by_slice[1]
    assert len(first.entries) == n and first.start == 1
    for result in by_slice.values():
        assert [e.token_id for e in result.entries] == prompt[1:]
        for a, b in zip(result.entries, first.entries, strict=True):
            assert abs(a.logprob - b.logprob) < 1e-5
            assert [t for t, _ in a.top] == [t for t, _ in b.top]
