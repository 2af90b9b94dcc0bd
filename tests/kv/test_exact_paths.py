"""The exact cold paths' rules (attention/cold/exact_paths.py): the CPU's share of a step's cold
blocks per path, decode rows and prefill chunks, on CUDA and off it."""

from __future__ import annotations

import pytest

from kvspill.attention.cold.config import ColdAttentionConfig
from kvspill.attention.cold.exact_paths import CpuPath, ExactPath, SplitPath, exact_path
from kvspill.plan.choices import ColdPath


@pytest.mark.parametrize("on_cuda", [True, False])
def test_stream_gives_the_cpu_nothing(on_cuda):
    rule = exact_path(ColdPath.STREAM, ColdAttentionConfig(path="stream"), on_cuda)
    assert type(rule) is ExactPath and not rule.uses_cpu_kernel
    assert rule.cpu_fraction == rule.decode_share(10**9, graphable=False) == rule.prefill_share(0.0) == 0.0


@pytest.mark.parametrize(("on_cuda", "prefill"), [(True, 0.0), (False, 1.0)])
def test_cpu_attends_decode_rows_and_streams_prefill_chunks_on_cuda(on_cuda, prefill):
    rule = exact_path(ColdPath.CPU, ColdAttentionConfig(path="cpu"), on_cuda)
    assert isinstance(rule, CpuPath) and rule.uses_cpu_kernel
    decode = rule.decode_share(1, graphable=False)
    assert decode == rule.cpu_fraction == 1.0
    assert rule.prefill_share(decode) == prefill  # compute-bound: on the GPU when there is one


def test_split_hands_over_only_from_the_thresholds():
    config = ColdAttentionConfig(
        path="split", cpu_fraction=0.4, min_split_layer_bytes=1000, min_split_layer_bytes_graphed=5000
    )
    rule = exact_path(ColdPath.SPLIT, config, on_cuda=True)
    assert isinstance(rule, SplitPath) and rule.uses_cpu_kernel and rule.cpu_fraction == 0.4
    assert rule.decode_share(999, graphable=False) == 0.0  # too few bytes to hand over
    assert rule.decode_share(1000, graphable=False) == 0.4
    assert rule.decode_share(4999, graphable=True) == 0.0  # it could replay a stream graph instead
    assert rule.decode_share(5000, graphable=True) == 0.4
    assert rule.prefill_share(0.4) == 0.0
    assert exact_path(ColdPath.SPLIT, config, on_cuda=False).prefill_share(0.4) == 0.4
