"""Engine-test helpers: see every logits row the runner samples from."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch


def _record_logits(llm) -> list[torch.Tensor]:
    """Wrap the model's compute_logits so a test sees every logits row the runner samples from."""
    recorded: list[torch.Tensor] = []
    model = llm.engine.runner.model
    original = model.compute_logits

    def recording(hidden: torch.Tensor, widen: bool = True) -> torch.Tensor:
        logits = original(hidden)  # fp32 whatever `widen` asks: its callers take fp32 too
        recorded.append(logits.detach().clone())
        return logits

    model.compute_logits = recording
    return recorded


@pytest.fixture(scope="session")
def record_logits() -> Callable[..., list[torch.Tensor]]:
    return _record_logits
