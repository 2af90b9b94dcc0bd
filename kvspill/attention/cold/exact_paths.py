"""The exact cold paths' rules: one object per `ColdPath` (stream, cpu, split), chosen once when
the backend is built (`exact_path`), saying which share of a step's cold blocks the CPU attends.

- stream: none; every cold block is copied to the GPU and attended there.
- cpu: all of a decode row's blocks; a prefill chunk's none on CUDA (below).
- split: per step, the share at which both parts end together (`ColdAttentionConfig.cpu_share_for`),
  or none where the step's cold bytes per layer are under the record's `SplitThresholds`.
A prefill chunk over cold KV is compute-bound (thousands of queries per key): on CUDA it belongs on
the GPU, so "cpu" and "split" stream it all (with "cpu" a 32K prefill over cold KV never finished
in 10 min, H200); off CUDA it takes the decode rows' share. Sparse decode rows select their own
blocks (`attention/cold/sparse.py`); sparse's other rows take the exact path "auto" would.

Invariant: a rule reads only its config and the step's cold bytes; the path is never re-decided.
"""

from __future__ import annotations

from kvspill.attention.cold.config import ColdAttentionConfig
from kvspill.plan.choices import ColdPath


class ExactPath:
    """The stream path's rule, and the base of the others: the CPU attends nothing."""

    path = ColdPath.STREAM
    uses_cpu_kernel = False  # the C++ kernel is loaded for the paths that attend on the CPU

    def __init__(self, config: ColdAttentionConfig, on_cuda: bool) -> None:
        self.config = config
        self.on_cuda = on_cuda

    @property
    def cpu_fraction(self) -> float:
        """The share reported in the stats (`ColdAttentionCounters.cpu_fraction`)."""
        return 0.0

    def decode_share(self, layer_bytes: int, graphable: bool) -> float:
        """The CPU's share of the decode rows' cold blocks in a step with `layer_bytes` of them per
        layer; `graphable`: the step could otherwise replay a stream graph (runner/stream_graphs.py)."""
        return self.cpu_fraction

    def prefill_share(self, decode_share: float) -> float:
        """The CPU's share of a prefill chunk's cold blocks (the module docstring)."""
        return decode_share


class CpuPath(ExactPath):
    path = ColdPath.CPU
    uses_cpu_kernel = True

    @property
    def cpu_fraction(self) -> float:
        return 1.0

    def prefill_share(self, decode_share: float) -> float:
        return 0.0 if self.on_cuda else decode_share


class SplitPath(CpuPath):
    path = ColdPath.SPLIT

    @property
    def cpu_fraction(self) -> float:
        return self.config.resolved_cpu_fraction()

    def decode_share(self, layer_bytes: int, graphable: bool) -> float:
        if not self.config.split_thresholds.splits(layer_bytes, graphable):
            return 0.0
        return self.config.cpu_share_for(layer_bytes)


EXACT_PATHS: dict[ColdPath, type[ExactPath]] = {
    ColdPath.STREAM: ExactPath,
    ColdPath.CPU: CpuPath,
    ColdPath.SPLIT: SplitPath,
}


def exact_path(path: ColdPath, config: ColdAttentionConfig, on_cuda: bool) -> ExactPath:
    """The rule of exact path `path` (stream, cpu or split)."""
    return EXACT_PATHS[path](config, on_cuda)
