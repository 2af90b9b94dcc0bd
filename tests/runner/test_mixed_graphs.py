"""The mixed-step CUDA graphs' form (`runner/mixed_graphs.py`) against the eager step, on the CPU:
every mixed step of a real workload (decodes beside prefill chunks of one or two prompts) is also
run in the graphs' static layout (decode rows padded to a bucket, the chunk padded to the graphs'
size, two prefill sequences with an absent one) and its sampled rows' logits must equal the eager
step's. Which steps qualify is checked too; the capture and replay need a GPU
(the last test, which fails on an H200 today: the graphs are opt-in, runner/mixed_graphs.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvspill.llm import LLM
from kvspill.plan.choices import MIXED_GRAPH_DECODES, mixed_decodes, prefill_floor_tokens
from kvspill.runner.cuda_graphs import batch_buckets
from kvspill.runner.inputs import StepInputs
from kvspill.runner.mixed_graphs import (
    MAX_PREFILLS,
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

    def forward(inputs: StepInputs, feed):
        if mixed_fits(inputs, shape):
            # K/V stored twice (here and by the eager step) are the same values: no harm
            want_graph = _graph_form_logits(runner, inputs, shape)
            logits, greedy = real_forward(inputs, feed)
            torch.testing.assert_close(want_graph, logits, atol=2e-5, rtol=2e-5)
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
@pytest.mark.xfail(
    strict=True,
    reason="H200 2026-12-02: replay logits differ from the eager step's by up to 3.6; the graphs are opt-in",
)
def test_mixed_graph_replay_equals_the_eager_step(tiny_llama_dir, monkeypatch) -> None:
    """On CUDA: every mixed step the engine replays from a graph gives the eager step's logits."""
    monkeypatch.setenv("KVSPILL_MIXED_CUDA_GRAPHS", "1")
    llm = LLM(str(tiny_llama_dir), dtype="float32", max_model_len=1024, max_num_batched_tokens=2048)
    runner = llm.engine.bundle.runner
    mixed = runner.mixed_graphs
    assert mixed is not None and mixed.shape.chunk == prefill_floor_tokens(llm.engine.config.block_size)
    real_run = mixed.run
    replayed = []

    def run(inputs, feed=None):
        out = real_run(inputs, feed)
        if out is not None:
            runner.mixed_graphs = None  # the eager step, for reference (stores the same K/V again)
            want, _ = runner._forward(inputs, feed)
            runner.mixed_graphs = mixed
            torch.testing.assert_close(out[0], want, atol=1e-3, rtol=1e-3)
            replayed.append(len(inputs.req_ids))
        return out

    monkeypatch.setattr(mixed, "run", run)
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(5, 250, (n,), generator=gen).tolist() for n in (300, 700, 520, 900)]
    llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))
    llm.close()
    assert replayed, "no mixed step was replayed"
