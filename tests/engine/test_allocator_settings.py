"""The engine runs CUDA's caching allocator with expandable segments unless the user configured
it: under the tight cap fixed segments fragmented and failed a 448 MiB prefill temporary with 757
MiB cached free (W3 fp8 128K, 16K-token chunks, H200, 2026-11-28)."""

from __future__ import annotations

import os

import pytest
import torch

from kvspill.engine.checks import EXPANDABLE_SEGMENTS, use_expandable_segments
from kvspill.model.parallel import TensorParallel


def test_a_single_rank_cuda_engine_turns_expandable_segments_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert use_expandable_segments(torch.device("cuda", 0)) is True
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == EXPANDABLE_SEGMENTS


def test_the_users_allocator_configuration_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert use_expandable_segments(torch.device("cuda", 0)) is False
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:False"


def test_cpu_engines_and_tensor_parallel_ranks_leave_it_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert use_expandable_segments(torch.device("cpu")) is False
    assert use_expandable_segments(torch.device("cuda", 1), TensorParallel(rank=1, size=2)) is False
    assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ


def test_a_started_allocator_with_no_segments_is_switched_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench starts CUDA before the engine: the setting then goes to the live allocator, through
    torch's current call, so no deprecation warning is printed (H200, torch 2.11, 2026-11-29)."""
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
    calls: list[str] = []
    monkeypatch.setattr(torch._C, "_accelerator_setAllocatorSettings", calls.append, raising=False)
    assert use_expandable_segments(torch.device("cuda", 0)) is True
    assert calls == [EXPANDABLE_SEGMENTS]


def test_a_started_allocator_holding_segments_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 2 << 20)
    assert use_expandable_segments(torch.device("cuda", 0)) is False
    assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ
