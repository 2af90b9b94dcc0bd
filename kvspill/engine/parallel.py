"""Tensor parallelism across processes: rank 0 is the engine, ranks 1..N-1 are step workers.

`start_tensor_parallel(config)` checks that the model splits over N ranks (before any process
starts), spawns N-1 workers (torch.multiprocessing, spawn) and joins the group as rank 0. Every
rank builds its own engine parts with `build_engine_parts(config, tp=tp)`: its shard of the
weights, its own KV tiers for its KV heads (gpu pool, pinned cpu pool, disk file, budgets; the
block counts agreed as the smallest any rank can hold, since the block ids come from rank 0's one
scheduler). Each step rank 0 broadcasts the step's `ScheduledBatch` (plain data, pickled over a
gloo group) before running it; each worker runs the same batch through its own `ModelRunner`.

As in vLLM v1, every rank runs the whole runner, sampling included: the logits are all-gathered
to every rank and bitwise equal there, so each rank samples the same tokens and keeps its
request state (and, with async scheduling, its device-side feed of sampled ids) without a
second message; rank 0's `StepOutput` is the one the scheduler reads.

Invariants:
- Backend: NCCL on CUDA (rank r on cuda:r; NVLink multicast off, NCCL_NVLS_ENABLE=0: on shared
  hosts it can take GPUs out of service), gloo on the CPU. Control messages always go over gloo.
- One tensor-parallel engine per process (torch.distributed's default group is process-wide).
- Workers resolve each step's tokens exactly when rank 0 does (after launching the next step
  with async scheduling, at once without), so their request states never diverge.
- `close()` sends a stop message, leaves the group as the workers do, then joins them; a worker
  that dies leaves rank 0 in a collective until the group's timeout (`_TIMEOUT`).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kvspill.config import EngineConfig
from kvspill.engine.setup import build_engine_parts, uses_async_scheduling
from kvspill.errors import InvalidParameterError
from kvspill.model.parallel import TensorParallel, valid_sizes
from kvspill.plan.spec import ModelSpec
from kvspill.runner.async_output import PendingStepOutput
from kvspill.types import ScheduledBatch

logger = logging.getLogger(__name__)

_TIMEOUT = timedelta(minutes=10)  # a collective waits this long for a rank that died
_STOP = None  # the message that ends a worker's loop


def check_splits_before_start(config: EngineConfig) -> None:
    """Refuse a size the model's heads or MLP cannot split, before any process starts."""
    n = config.tensor_parallel_size
    try:
        spec = ModelSpec.from_model_arg(config.model)
    except Exception as e:  # the loader reports a missing or broken model with its own message
        logger.debug("no shapes before start: %s", e)
        return
    if spec.num_heads % n or spec.num_kv_heads % n or spec.intermediate_size % n:
        raise InvalidParameterError(
            "tensor_parallel_size",
            f"--tensor-parallel-size {n} cannot split {spec.name or 'this model'}: it has {spec.num_heads} "
            f"attention heads, {spec.num_kv_heads} KV heads and an MLP of {spec.intermediate_size}, and "
            "each rank needs a whole share of each (KV heads are not replicated). Sizes that work: "
            f"{valid_sizes(spec.num_heads, spec.num_kv_heads, spec.intermediate_size)}",
        )


def _backend(config: EngineConfig) -> str:
    return "nccl" if config.device != "cpu" and torch.cuda.is_available() else "gloo"


def _join_group(config: EngineConfig, rank: int, port: int) -> TensorParallel:
    size = config.tensor_parallel_size
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # before NCCL initializes (module docstring)
    backend = _backend(config)
    if backend == "gloo":
        # Each rank's share of the host's cores: ranks that oversubscribe them crawl.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))
    else:
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size, timeout=_TIMEOUT
    )
    control = dist.new_group(backend="gloo", timeout=_TIMEOUT) if backend != "gloo" else None
    return TensorParallel(rank=rank, size=size, group=dist.group.WORLD, control=control)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker_main(index: int, config: EngineConfig, port: int) -> None:
    """Rank index + 1: build this rank's parts, then run every step rank 0 sends until told to stop."""
    logging.basicConfig(level=logging.WARNING)
    # Ctrl+C in a terminal signals the whole process group: a worker leaves when rank 0 tells it,
    # after rank 0 has ended its requests. (SIGTERM keeps its default: multiprocessing ends daemon
    # workers with it when rank 0 exits without closing; `systemctl stop` signals every process of
    # the unit, and rank 0's close() then finds such a worker gone and says so in one line.)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tp = _join_group(config, index + 1, port)
    parts = build_engine_parts(config, tp=tp)
    runner = parts.runner
    async_mode = uses_async_scheduling(config, parts.device)
    previous: PendingStepOutput | None = None
    box: list[Any] = [None]
    try:
        while True:
            dist.broadcast_object_list(box, src=0, group=tp.control)
            batch = box[0]
            if batch is _STOP:
                break
            pending = runner.execute_async(batch)
            if previous is not None:
                previous.result()
            previous = pending
            if not async_mode or batch.empty:  # as LLMEngine.step reads results
                pending.result()
                previous = None
    finally:
        runner.release_graphs()  # NCCL's teardown waits for graphs that captured its collectives
        dist.destroy_process_group()
    # Leave without the interpreter's teardown: destructors of torch's C++ threads at exit
    # sometimes abort ("terminate called without an active exception", seen on 2 CPU cores in
    # CI), which rank 0 would report as a failed worker after a run that finished. Everything
    # this rank owned is done: flush what Python buffered and go.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class TensorParallelGroup:
    """Rank 0's side: the spawned workers and the step broadcast."""

    def __init__(self, config: EngineConfig) -> None:
        if dist.is_initialized():
            raise InvalidParameterError(
                "tensor_parallel_size",
                "this process already runs a tensor-parallel engine: close it first (one per process)",
            )
        check_splits_before_start(config)
        if _backend(config) == "nccl" and torch.cuda.device_count() < config.tensor_parallel_size:
            raise InvalidParameterError(
                "tensor_parallel_size",
                f"--tensor-parallel-size {config.tensor_parallel_size} needs as many GPUs; "
                f"{torch.cuda.device_count()} are visible (or pass --device cpu for gloo processes)",
            )
        port = _free_port()
        os.environ["NCCL_NVLS_ENABLE"] = "0"  # the workers inherit it too
        self._threads = torch.get_num_threads()
        self._context = mp.start_processes(
            _worker_main,
            args=(config, port),
            nprocs=config.tensor_parallel_size - 1,
            join=False,
            daemon=True,
            start_method="spawn",
        )
        self.tp = _join_group(config, 0, port)
        self._closed = False

    def send(self, batch: ScheduledBatch | None) -> None:
        """Broadcast one step's contract to every worker (None: stop)."""
        dist.broadcast_object_list([batch], src=0, group=self.tp.control)

    def close(self) -> None:
        """Stop the workers and leave the group (idempotent).

        Rank 0 leaves the group right after the stop message, while the workers leave it: NCCL's
        communicator teardown waits for every rank, so joining the workers first would wait for
        them inside it until the join's timeout (60 s with 2 and 4 H200s, 2026-11-26)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.send(_STOP)
        except RuntimeError as e:  # a worker gone already (killed): the others still leave below
            logger.warning("a tensor-parallel worker was gone before the stop message: %s", e)
        finally:
            dist.destroy_process_group()
            torch.set_num_threads(self._threads)
            try:
                self._context.join(timeout=60)
            except mp.ProcessExitedException as e:  # it stopped, then crashed on its way out
                logger.warning("a tensor-parallel worker ended abnormally after it stopped: %s", e)
            finally:
                for process in self._context.processes:
                    if process.is_alive():
                        process.terminate()
