"""The GPU waits for a CPU result on a flag in pinned memory (storage/stream_flag.py), not the host."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from kvspill.attention.cold import cpu as cold_cpu
from kvspill.attention.cold.config import ColdAttentionConfig, ColdSeq
from kvspill.attention.cold.dispatch import ColdAttentionBackend
from kvspill.storage.storage import KVLayout, TieredKVStorage
from kvspill.storage.stream_flag import StreamFlag
from kvspill.types import TIER_CPU

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DEVICE = torch.device("cuda")


def test_the_stream_runs_past_the_wait_only_once_the_flag_is_set() -> None:
    flag = StreamFlag.create(DEVICE)
    assert flag is not None, "the driver has cuStreamWaitValue32 on every GPU these tests run on"
    x = torch.zeros(4, device=DEVICE)
    # Load the add kernel first: under CUDA's lazy loading, a kernel's first launch may wait for
    # the device to go idle, here behind the wait that only this thread would release (a
    # deadlock; the engine's kernels are loaded by prefill and warm-up, and its flag is set by
    # another thread).
    x.add_(0)
    torch.cuda.synchronize(DEVICE)
    value = flag.next_value()
    flag.wait(value)
    x.add_(1)
    after = torch.cuda.Event()
    after.record()
    time.sleep(0.2)  # ample for the GPU to run an add that nothing held back
    assert not after.query(), "the kernel after the wait ran before the flag was set"
    flag.set(value)
    after.synchronize()
    assert x.tolist() == [1.0] * 4
    # a later value releases an earlier wait (a part that failed early), and never goes back
    earlier, later = flag.next_value(), flag.next_value()
    flag.wait(earlier)
    x.add_(1)
    flag.set(later)
    flag.set(earlier)
    _synchronizes_within(30)
    assert x.tolist() == [2.0] * 4 and int(flag.cell.item()) == later


def _synchronizes_within(seconds: float) -> None:
    done = threading.Event()
    threading.Thread(target=lambda: (torch.cuda.synchronize(DEVICE), done.set()), daemon=True).start()
    assert done.wait(seconds), "the stream still waits for a flag value that was never set"


def _backend_and_seq(num_blocks: int = 64) -> tuple[ColdAttentionBackend, ColdSeq]:
    layout = KVLayout(3, 16, 2, 64, torch.bfloat16)
    storage = TieredKVStorage(layout, 4, DEVICE, num_cpu_blocks=num_blocks)
    storage.cpu_cache.normal_()
    backend = ColdAttentionBackend(storage, ColdAttentionConfig(path="cpu", cpu_workers=1))
    seq = ColdSeq(0, 1, np.full(num_blocks, TIER_CPU), np.arange(num_blocks, dtype=np.int64))
    return backend, seq


def test_cpu_results_come_through_the_flag_and_equal_the_inline_path() -> None:
    backend, seq = _backend_and_seq()
    assert backend.cpu_done is not None
    q = torch.randn(1, 8, 64, dtype=torch.bfloat16, device=DEVICE)
    got = []
    step = backend.for_step([seq], 0.125)
    assert step is not None
    for layer in range(3):
        got.append(step.finish(step.begin(layer, q)))
    inline = ColdAttentionBackend(backend.storage, ColdAttentionConfig(path="cpu"))
    step = inline.for_step([seq], 0.125)
    assert step is not None and inline.cpu_done is None
    for layer in range(3):
        o, lse = step.finish(step.begin(layer, q))
        torch.testing.assert_close(got[layer][0], o)
        torch.testing.assert_close(got[layer][1], lse)
    backend.close()


def test_a_failing_cpu_part_raises_on_the_host_and_leaves_no_stream_waiting(monkeypatch) -> None:
    backend, seq = _backend_and_seq()

    def fail(*args: object) -> None:
        raise RuntimeError("the CPU part failed")

    monkeypatch.setattr(cold_cpu.ColdCpuPath, "work", fail)
    q = torch.randn(1, 8, 64, dtype=torch.bfloat16, device=DEVICE)
    step = backend.for_step([seq], 0.125)
    assert step is not None
    with pytest.raises(RuntimeError, match="the CPU part failed"):
        for layer in range(3):
            step.finish(step.begin(layer, q))
    _synchronizes_within(30)
    backend.close()
