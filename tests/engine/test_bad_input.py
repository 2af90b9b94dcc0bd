"""Every bad input gets a clear error that says what to change, never a deep traceback."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvspill.cli.main import _register_commands, app
from kvspill.config import EngineConfig
from kvspill.errors import ContextLengthExceededError, InvalidParameterError, ModelNotFoundError
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams


@pytest.fixture(scope="module")
def tiny(tiny_llama_dir) -> LLM:
    return LLM(str(tiny_llama_dir), device="cpu", dtype="float32", max_model_len=128)


def test_missing_model_path(tmp_path):
    with pytest.raises(ModelNotFoundError, match="does-not-exist"):
        LLM(str(tmp_path / "does-not-exist"), device="cpu")


def test_prompt_longer_than_context(tiny):
    with pytest.raises(ContextLengthExceededError) as e:
        tiny.generate([[5] * 200], SamplingParams(max_tokens=4))
    assert str(e.value).startswith(
        "This model's maximum context length is 128 tokens. However, your request has 200 input tokens"
    )


def test_prompt_plus_max_tokens_over_context(tiny):
    with pytest.raises(ContextLengthExceededError, match="100 input tokens and asks for 50 output tokens"):
        tiny.generate([[5] * 100], SamplingParams(max_tokens=50))


def test_failed_add_leaves_no_request_behind(tiny):
    with pytest.raises(ContextLengthExceededError):
        tiny.generate([[5] * 10, [5] * 500], SamplingParams(max_tokens=4))
    assert not tiny.engine.has_unfinished_requests()
    assert tiny.generate([[5] * 10], SamplingParams(max_tokens=2, ignore_eos=True))[0].num_output_tokens == 2


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -1.0),
        ("top_p", 0.0),
        ("top_k", -5),
        ("min_p", 2.0),
        ("max_tokens", 0),
        ("presence_penalty", 3.0),
        ("repetition_penalty", 0.0),
        ("logprobs", 99),
    ],
)
def test_invalid_sampling_value_names_the_field(field, value):
    with pytest.raises(InvalidParameterError) as e:
        SamplingParams(**{field: value})
    assert e.value.param == field and field in str(e.value)


def test_token_id_outside_vocabulary(tiny):
    with pytest.raises(InvalidParameterError, match="outside the model's vocabulary"):
        tiny.generate([[1, 2, 10**6]], SamplingParams(max_tokens=2))


def test_invalid_engine_option():
    with pytest.raises(InvalidParameterError, match="--block-size"):
        EngineConfig(block_size=12)
    with pytest.raises(InvalidParameterError, match="rope_type"):
        EngineConfig(rope_scaling={"rope_type": "bogus", "factor": 2.0})


def test_cli_prints_one_line_and_exits_2(tmp_path):
    _register_commands()
    result = CliRunner().invoke(app, ["generate", "hi", "--model", str(tmp_path / "nope"), "--device", "cpu"])
    assert result.exit_code == 2
    assert "error:" in result.output and "Traceback" not in result.output


def test_cli_bad_sampling_value():
    result = CliRunner().invoke(app, ["generate", "hi", "--temperature", "-3"])
    assert result.exit_code == 2 and "temperature" in result.output


def test_cpu_attention_threads_sets_threads_and_keeps_cores(tiny_llama_dir):
    import os

    import torch

    threads, affinity = torch.get_num_threads(), os.sched_getaffinity(0)
    try:
        LLM(str(tiny_llama_dir), device="cpu", dtype="float32", cpu_attention_threads=1)
        assert torch.get_num_threads() == 1
        assert len(os.sched_getaffinity(0)) == min(2, len(affinity))  # its core plus the engine's
    finally:
        torch.set_num_threads(threads)
        os.sched_setaffinity(0, affinity)
    with pytest.raises(InvalidParameterError, match="--cpu-attention-threads"):
        EngineConfig(cpu_attention_threads=0)


def test_server_admission_by_the_kv_tiers_room(tiny_llama_dir):
    from kvspill.errors import KVCacheBusyError, OutOfKVMemoryError

    # 8 blocks of 16 tokens: 128 tokens of KV in all.
    llm = LLM(str(tiny_llama_dir), device="cpu", dtype="float32", max_model_len=256, num_kv_blocks=8)
    engine = llm.engine
    assert engine.kv_capacity_tokens() == 128
    with pytest.raises(OutOfKVMemoryError, match="needs KV for 150 tokens"):
        engine.add_request([5] * 50, SamplingParams(max_tokens=100), admission=True)
    first = engine.add_request([5] * 50, SamplingParams(max_tokens=40, ignore_eos=True), admission=True)
    with pytest.raises(KVCacheBusyError, match="committed"):
        engine.add_request([5] * 20, SamplingParams(max_tokens=30), admission=True)
    engine.add_request([5] * 20, SamplingParams(max_tokens=30))  # offline callers queue instead
    while engine.has_unfinished_requests():
        engine.step()
    assert engine.add_request([5] * 20, SamplingParams(max_tokens=30), admission=True) != first
