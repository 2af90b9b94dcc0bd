"""profile_decode on the CPU with a tiny model: with several sequences it times only the steps in
which all of them decode, and says how many."""

from __future__ import annotations

import pytest
import torch

from kvspill.bench import profile_decode


def test_concurrency_counts_pure_decode_steps_only(tiny_llama_dir, capsys, monkeypatch):
    seen = []
    original = profile_decode._pure_decode

    def spy(step, n, tokens):
        pure = original(step, n, tokens)
        seen.append((pure, len(step.outputs), sum(len(o.delta_token_ids) for o in step.outputs)))
        return pure

    monkeypatch.setattr(profile_decode, "_pure_decode", spy)
    argv = ["--model", str(tiny_llama_dir), "--ctx", "300", "--steps", "12", "--concurrency", "3"]
    assert profile_decode.main([*argv, "--kv-cache-memory", "50MiB", "--no-async-scheduling"]) == 0
    out = capsys.readouterr().out
    assert "ctx 300 x 3: 12 pure decode steps on the CPU" in out and "tok/s in all" in out
    assert sum(pure for pure, _, _ in seen) == 12
    assert all(outputs == 3 and tokens == 3 for pure, outputs, tokens in seen if pure)
    assert not seen[0][0]  # the first step prefills


def test_report_names_a_phase_no_step_ran(capsys):
    # At 32K with a 4 GiB KV cache (H200, 2026-12-03) no step replayed a graph: the report died on
    # the empty phase's median instead of printing the steps it had timed.
    from types import SimpleNamespace

    args = SimpleNamespace(model=None, shape="llama-8b", ctx=32768, concurrency=1)
    times = {"launch (host)": [0.001] * 20, "graph copy+replay": []}
    from tests.plan.test_batched import _plan

    engine = SimpleNamespace(async_scheduling=True, memory_plan=_plan())
    profile_decode._report(args, engine, [0.005] * 20, times, [])
    out = capsys.readouterr().out
    assert "engine.step" in out and "200.0 tok/s" in out
    assert "graph copy+replay" in out and "(not run)" in out and "graph GPU time" not in out


def test_report_prints_the_sized_plan_at_its_batch(capsys):
    """A CUDA plan (built here, no GPU needed) that predicts 8 x 2K: its line beside the measured."""
    from types import SimpleNamespace

    from kvspill.plan.batched import batched_decode
    from tests.plan.test_batched import _plan

    plan = _plan()
    args = SimpleNamespace(model=None, shape="llama-8b:q4_k_m", ctx=2048, concurrency=8)
    engine = SimpleNamespace(async_scheduling=True, memory_plan=plan)
    profile_decode._report(args, engine, [0.003774] * 20, {}, [])  # 8 x 2K: the split rows' mean, 2,120 tok/s
    out = capsys.readouterr().out
    planned = batched_decode(plan, 8).tok_s
    assert f"plan               {planned:8.1f} tok/s in all (plan / measured" in out
    assert "1.00" in out.split("plan / measured")[1]


def test_profiler_window_brackets_exactly_its_steps(monkeypatch, capsys):
    """ncu --profile-from-start off sees the kernels between start and stop: the window's steps and
    the GPU work they queued (synchronized before stop), none of an earlier step's."""
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append("sync"))
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: calls.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: calls.append("stop"))

    class Engine:
        def run(self):
            for i in range(10):
                calls.append(f"step {i}")
                yield i

    profile_decode._profiler_window(Engine(), 3)
    assert calls == ["sync", "start", "step 0", "step 1", "step 2", "sync", "stop"]
    assert "3 engine steps" in capsys.readouterr().out


def test_profiler_window_on_the_cpu_says_what_to_drop(tiny_llama_dir):
    with pytest.raises(SystemExit, match="needs a CUDA GPU.*drop it"):
        profile_decode.main(["--model", str(tiny_llama_dir), "--profiler-window", "2"])
