"""The mixed-step CUDA graphs' form (`runner/mixed_graphs.py`) against the eager step, on the CPU:
every mixed step of a real workload (decodes beside prefill chunks of one or two prompts) is also
run in the graphs' static layout (decode rows padded to a bucket, the chunk padded to the graphs'
size, two prefill sequences with an absent one) and its sampled rows' logits must equal the eager
step's. Which steps qualify is checked too. A replay's semantics (static inputs and outputs reused
step after step, fed in-flight ids under async scheduling) are checked on the CPU with a stand-in
for the graph (`CpuMixedGraphs`); the capture and replay themselves need a GPU (the last test)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
import torch

from kvspill.llm import LLM
from kvspill.plan.choices import MIXED_GRAPH_DECODES, batch_buckets, mixed_decodes, prefill_floor_tokens
from kvspill.plan.choices import MIXED_GRAPH_PREFILLS as MAX_PREFILLS
from kvspill.runner.async_output import DeviceFeed
from kvspill.runner.inputs import StepInputs
from kvspill.runner.mixed_graphs import (
    MixedGraphs,
    MixedShape,
    fill_mixed_rows,
    mixed_fits,
    mixed_sample_index,
    run_mixed_model,
)
from kvspill.runner.model_runner import ModelRunner
from kvspill.sampling_params import SamplingParams

CHUNK = 24
BUCKETS = [1, 2, 4]


def _graph_form_logits(runner: ModelRunner, inputs: StepInputs, shape: MixedShape) -> torch.Tensor:
    bucket = next(b for b in BUCKETS if b >= inputs.num_decodes)
    i64 = np.full((4, shape.rows), 7, dtype=np.int64)  # stale values the fill must overwrite
    i32 = np.full(shape.i32_size, 3, dtype=np.int32)
    fill_mixed_rows(inputs, bucket, shape, i64, i32)
    buffers = (torch.from_numpy(i64), torch.from_numpy(i32))
    logits, _ = run_mixed_model(runner.model, runner.storage, runner.scale, buffers, bucket, shape)
    return logits[mixed_sample_index(inputs, bucket)]


class _ReplayOnCpu:
    """A captured graph's behaviour without CUDA: `replay()` reruns the captured function and writes
    its results into the same output tensors every time, so views of them handed out earlier (a
    step's sampled ids, which the next step feeds from) change at the next replay, as on a GPU."""

    def __init__(self, run: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.run = run
        self.outputs = tuple(t.clone() for t in run())

    def replay(self) -> None:
        for out, new in zip(self.outputs, self.run(), strict=True):
            out.copy_(new)


class _OneHostSet:
    """HostSets without CUDA events: CPU copies are done when they return."""

    def __init__(self, i64: torch.Tensor, i32: torch.Tensor) -> None:
        self.sets = [(i64.clone(), i32.clone())]

    def take(self) -> tuple[torch.Tensor, ...]:
        return self.sets[0]

    def queued(self) -> None:
        pass


class CpuMixedGraphs(MixedGraphs):
    """`MixedGraphs` with its replay done on the CPU (`_ReplayOnCpu`): the production `run` (fill,
    upload, feed, replay, sampled rows) over static buffers and outputs reused step after step."""

    def __init__(self, runner: ModelRunner, buckets: list[int], shape: MixedShape) -> None:
        # MixedGraphs.__init__ less its CUDA parts (memory pool, capture stream, pinned memory)
        self.model, self.storage, self.scale = runner.model, runner.storage, runner.scale
        self.buckets, self.shape = buckets, shape
        self.i64 = torch.zeros((4, shape.rows), dtype=torch.int64)
        self.i32 = torch.zeros(shape.i32_size, dtype=torch.int32)
        self.i64[2].fill_(-1)  # padding only while capturing, as MixedGraphs.capture
        self.host_sets = _OneHostSet(self.i64, self.i32)  # type: ignore[assignment]
        self.graphs, self.outputs = {}, {}
        for b in buckets:
            graph = _ReplayOnCpu(
                partial(run_mixed_model, self.model, self.storage, self.scale, (self.i64, self.i32), b, shape)
            )
            self.graphs[b], self.outputs[b] = graph, graph.outputs  # type: ignore[assignment]


def test_the_graph_form_of_mixed_steps_equals_the_eager_step(tiny_llama_dir, monkeypatch) -> None:
    llm = LLM(
        str(tiny_llama_dir),
        device="cpu",
        dtype="float32",
        block_size=8,
        max_model_len=256,
        max_num_batched_tokens=CHUNK,
        enable_prefix_caching=False,
    )
    runner = llm.engine.bundle.runner
    shape = MixedShape(max_decodes=BUCKETS[-1], chunk=CHUNK, max_blocks=256 // 8)
    real_forward = runner._forward
    checked = {"steps": 0, "two_prefills": 0}
    diffs: list[float] = []

    def forward(inputs: StepInputs, feed):
        if mixed_fits(inputs, shape):
            # K/V stored twice (here and by the eager step) are the same values: no harm
            want_graph = _graph_form_logits(runner, inputs, shape)
            logits, greedy = real_forward(inputs, feed)
            diffs.append(float((want_graph - logits).abs().max()))  # a raise here: the engine retries
            checked["steps"] += 1
            checked["two_prefills"] += len(inputs.req_ids) - inputs.num_decodes == 2
            return logits, greedy
        return real_forward(inputs, feed)

    monkeypatch.setattr(runner, "_forward", forward)
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(5, 250, (n,), generator=gen).tolist() for n in (9, 30, 17, 45, 40)]
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    llm.close()
    assert all(len(o.token_ids) == 12 for o in outs)
    assert checked["steps"] >= 5 and checked["two_prefills"] >= 1, checked
    assert max(diffs) < 2e-5, diffs


def _checked_replay(
    runner: ModelRunner,
    mixed: MixedGraphs,
    real_run: Callable,
    inputs: StepInputs,
    feed: DeviceFeed | None,
    diffs: list[tuple[float, int, bool]],
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`MixedGraphs.run`'s output, the step checked against the eager step when it replays. The eager
    step runs first: with async scheduling the feed's source is the previous step's sampled ids, a view
    of a graph output when that step replayed too, and this replay rewrites it; an eager step run
    after it read this step's own argmax as its decode rows' input ids (the H200 failure: up to
    3.6 off, rows of decodes fed from a replay of the same bucket). Both store the same K/V.
    Appends (max |diff| / (1 + |eager|), decodes, fed) to `diffs`, or (inf, ...) when the step
    raised: the engine would retry its requests alone, eagerly, and the run would pass."""
    if not (mixed.graphs and mixed_fits(inputs, mixed.shape)):
        return real_run(inputs, feed)
    try:
        runner.mixed_graphs = None
        # a copy of the ids: on the CPU the eager step feeds into the very array (from_numpy)
        want, _ = runner._forward(replace(inputs, input_ids=inputs.input_ids.copy()), feed)
        runner.mixed_graphs = mixed
        out = real_run(inputs, feed)
        assert out is not None
    except Exception:
        diffs.append((float("inf"), inputs.num_decodes, feed is not None))
        raise
    diff = float(((out[0] - want).abs() / (1 + want.abs())).max())  # atol = rtol, as assert_close
    diffs.append((diff, inputs.num_decodes, feed is not None))
    return out


def test_replayed_mixed_steps_equal_eager_ones_with_async_scheduling(tiny_llama_dir, monkeypatch) -> None:
    """The replay's semantics on the CPU (`CpuMixedGraphs`: outputs rewritten at each replay) under
    async scheduling: the feed of in-flight ids into the static rows, the sampled views the next
    step feeds from; each replayed step equals the eager step and the tokens equal an eager run."""
    options = dict(device="cpu", dtype="float32", block_size=8, max_model_len=256)
    options.update(max_num_batched_tokens=CHUNK, enable_prefix_caching=False, async_scheduling=True)
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(5, 250, (n,), generator=gen).tolist() for n in (9, 30, 17, 45, 40)]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    llm = LLM(str(tiny_llama_dir), **options)
    want_tokens = [o.token_ids for o in llm.generate(prompts, params)]
    llm.close()
    llm = LLM(str(tiny_llama_dir), **options)
    runner = llm.engine.bundle.runner
    mixed = CpuMixedGraphs(runner, BUCKETS, MixedShape(BUCKETS[-1], CHUNK, 256 // 8))
    runner.mixed_graphs, real_run = mixed, mixed.run
    fed_from_a_replay = 0
    diffs: list[tuple[float, int, bool]] = []  # _checked_replay's

    def run(inputs: StepInputs, feed: DeviceFeed | None = None):
        nonlocal fed_from_a_replay
        if runner._last_sampled is not None:  # CUDA queues this copy at sampling; the CPU reads it later
            runner._last_sampled.resolve()
        outputs = {o.untyped_storage().data_ptr() for _, o in mixed.outputs.values()}
        fed_from_a_replay += feed is not None and feed.source.untyped_storage().data_ptr() in outputs
        return _checked_replay(runner, mixed, real_run, inputs, feed, diffs)

    monkeypatch.setattr(mixed, "run", run)
    got = [o.token_ids for o in llm.generate(prompts, params)]
    llm.close()
    assert fed_from_a_replay >= 2  # the case the GPU harness had wrong
    assert len(diffs) >= 5 and max(d for d, _, _ in diffs) < 2e-5, diffs
    assert got == want_tokens


def test_which_steps_the_graphs_hold() -> None:
    shape = MixedShape(max_decodes=4, chunk=16, max_blocks=8)

    def step(decodes: int, chunks: list[int], width: int = 4, cold: bool = False) -> StepInputs:
        lens = [1] * decodes + chunks
        n = sum(lens)
        inputs = StepInputs(
            req_ids=[f"r{i}" for i in range(len(lens))],
            num_decodes=decodes,
            input_ids=np.zeros(n, np.int64),
            positions=np.zeros(n, np.int64),
            slot_mapping=np.zeros(n, np.int64),
            query_start_loc=np.concatenate([[0], np.cumsum(lens)]).astype(np.int32),
            seq_lens=np.full(len(lens), 40, np.int32),
            block_tables=np.zeros((len(lens), width), np.int32),
            gpu_seq_lens=np.full(len(lens), 40, np.int32),
        )
        if cold:
            inputs.cold_seqs = [object()]  # type: ignore[list-item]
        return inputs

    assert mixed_fits(step(1, [16]), shape) and mixed_fits(step(4, [10, 6]), shape)
    assert not mixed_fits(step(0, [16]), shape)  # nobody decodes: nobody waits on this step
    assert not mixed_fits(step(5, [8]), shape)  # more decodes than the largest bucket
    assert not mixed_fits(step(2, [17]), shape)  # a chunk longer than the graphs'
    assert not mixed_fits(step(2, [4, 4, 4]), shape)  # more prompts than MAX_PREFILLS
    assert not mixed_fits(step(2, [8], width=9), shape)  # a wider block table
    assert not mixed_fits(step(2, [8], cold=True), shape)  # cold blocks run their own paths
    assert not mixed_fits(step(3, []), shape)  # decode-only: the decode graphs' step
    assert MAX_PREFILLS == 2


@pytest.mark.parametrize("max_num_seqs", [1, 8, 12, 16, 64, 70, 100, 256])
def test_mixed_buckets_are_decode_buckets(max_num_seqs: int) -> None:
    """The mixed graphs take the decode graphs' buckets up to mixed_decodes(): that one is a bucket."""
    assert mixed_decodes(max_num_seqs) in batch_buckets(max_num_seqs)
    assert mixed_decodes(max_num_seqs) <= MIXED_GRAPH_DECODES
    assert prefill_floor_tokens(16) == 256 and prefill_floor_tokens(128) == 512


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_mixed_graph_replay_equals_the_eager_step(tiny_llama_dir, monkeypatch) -> None:
    """On CUDA: every mixed step the engine replays from a graph gives the eager step's logits."""
    monkeypatch.setenv("KVSPILL_MIXED_CUDA_GRAPHS", "1")
    llm = LLM(str(tiny_llama_dir), dtype="float32", max_model_len=1024, max_num_batched_tokens=2048)
    runner = llm.engine.bundle.runner
    mixed = runner.mixed_graphs
    assert mixed is not None and mixed.shape.chunk == prefill_floor_tokens(llm.engine.config.block_size)
    real_run = mixed.run
    diffs: list[tuple[float, int, bool]] = []

    def run(inputs, feed=None):
        return _checked_replay(runner, mixed, real_run, inputs, feed, diffs)

    monkeypatch.setattr(mixed, "run", run)
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(5, 250, (n,), generator=gen).tolist() for n in (300, 700, 520, 900)]
    llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))
    llm.close()
    assert len(diffs) >= 2, f"{len(diffs)} mixed steps replayed"
    assert max(d for d, _, _ in diffs) < 1e-3, diffs
