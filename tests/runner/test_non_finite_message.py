"""What a request that meets NaN or inf logits on the CPU is told (runner/model_runner.py)."""

from __future__ import annotations

import torch

from kvspill.runner.model_runner import _non_finite_message


def test_float32_points_at_the_weights_not_at_a_wider_dtype():
    assert "--dtype" not in _non_finite_message(torch.float32)
    assert "weights hold NaN or inf" in _non_finite_message(torch.float32)
    for narrow in (torch.float16, torch.bfloat16):
        assert "restart with --dtype bfloat16 or --dtype float32" in _non_finite_message(narrow)
