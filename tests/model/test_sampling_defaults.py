"""The model's recommended sampling values (text/sampling_defaults.py): where they are read, what
is kept, and that a request that leaves a value out gets them, one that sets it keeps its own."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from tiny_gguf import write_tiny_gguf

from kvspill.config import EngineConfig
from kvspill.errors import InvalidParameterError
from kvspill.model.resolve import resolve_model
from kvspill.sampling_params import SamplingParams
from kvspill.server.protocol import ChatCompletionRequest, CompletionRequest
from kvspill.text.sampling_defaults import model_sampling_defaults

LLAMA_31 = {
    "bos_token_id": 128000,
    "do_sample": True,
    "eos_token_id": [128001, 128009],
    "temperature": 0.6,
    "top_p": 0.9,
}
QWEN_25 = {"repetition_penalty": 1.05, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "max_new_tokens": 512}


def _model_dir(tmp_path: Path, source: Path, generation_config: dict[str, Any] | None) -> Path:
    model = tmp_path / "m"
    shutil.copytree(source, model)
    if generation_config is not None:
        (model / "generation_config.json").write_text(json.dumps(generation_config))
    return model


def test_generation_config_json_values_are_read(tmp_path: Path, tiny_llama_dir: Path) -> None:
    model = _model_dir(tmp_path, tiny_llama_dir, LLAMA_31)
    assert model_sampling_defaults(resolve_model(str(model))) == {"temperature": 0.6, "top_p": 0.9}
    (model / "generation_config.json").write_text(json.dumps(QWEN_25))
    assert model_sampling_defaults(resolve_model(str(model))) == {
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
        "repetition_penalty": 1.05,
    }  # max_new_tokens is not a sampling default here: max_tokens stays the request's


def test_a_model_without_recommendations_keeps_openais(tmp_path: Path, tiny_llama_dir: Path) -> None:
    model = _model_dir(tmp_path, tiny_llama_dir, {"bos_token_id": 1, "eos_token_id": 2})
    assert model_sampling_defaults(resolve_model(str(model))) == {}
    (model / "generation_config.json").unlink()
    assert model_sampling_defaults(resolve_model(str(model))) == {}
    assert model_sampling_defaults(None) == {}


def test_none_and_a_folder(tmp_path: Path, tiny_llama_dir: Path) -> None:
    resolved = resolve_model(str(_model_dir(tmp_path, tiny_llama_dir, LLAMA_31)))
    assert model_sampling_defaults(resolved, "none") == {} == model_sampling_defaults(resolved, "vllm")
    other = tmp_path / "mine"
    other.mkdir()
    (other / "generation_config.json").write_text(json.dumps({"temperature": 0.2, "min_p": 0.05}))
    assert model_sampling_defaults(resolved, str(other)) == {"temperature": 0.2, "min_p": 0.05}


def test_values_sampling_refuses_are_left_out_with_a_warning(
    tmp_path: Path, tiny_llama_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = {"temperature": "hot", "top_p": 0.0, "top_k": 2.5, "min_p": 0.1, "repetition_penalty": True}
    model = _model_dir(tmp_path, tiny_llama_dir, bad)
    with caplog.at_level(logging.WARNING, logger="kvspill.text.sampling_defaults"):
        assert model_sampling_defaults(resolve_model(str(model))) == {"min_p": 0.1}
    said = caplog.text
    for name in ("temperature", "top_p", "top_k", "repetition_penalty"):
        assert f"{name} is left out of the sampling defaults" in said
    (model / "generation_config.json").write_text("{not json")
    assert model_sampling_defaults(resolve_model(str(model))) == {}


def test_gguf_general_sampling_metadata(tmp_path: Path) -> None:
    def sampling(writer: Any) -> int:
        writer.add_float32("general.sampling.temp", 0.8)
        writer.add_int32("general.sampling.top_k", 40)
        writer.add_float32("general.sampling.top_p", 0.95)
        writer.add_float32("general.sampling.penalty_repeat", 1.1)
        return 32

    path = write_tiny_gguf(tmp_path / "s.gguf", add_tokenizer=sampling)
    got = model_sampling_defaults(resolve_model(str(path)))
    assert got == pytest.approx({"temperature": 0.8, "top_k": 40, "top_p": 0.95, "repetition_penalty": 1.1})
    assert isinstance(got["top_k"], int)
    assert model_sampling_defaults(resolve_model(str(write_tiny_gguf(tmp_path / "plain.gguf")))) == {}


def test_generation_config_flag_is_checked(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="--generation-config must be auto, none or a folder"):
        EngineConfig(generation_config=str(tmp_path))
    (tmp_path / "generation_config.json").write_text("{}")
    assert EngineConfig(generation_config=str(tmp_path)).generation_config == str(tmp_path)
    assert EngineConfig(generation_config="vllm").generation_config == "vllm"


def test_a_request_keeps_its_own_values_over_the_defaults() -> None:
    defaults = {"temperature": 0.6, "top_p": 0.9, "top_k": 20}
    chat = ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], top_p=0.5)
    params = chat.sampling_params(defaults)
    assert (params.temperature, params.top_p, params.top_k) == (0.6, 0.5, 20)
    explicit = CompletionRequest(prompt="a", temperature=1.0).sampling_params(defaults)
    assert (explicit.temperature, explicit.top_p, explicit.max_tokens) == (1.0, 0.9, 16)
    assert chat.sampling_params() == ChatCompletionRequest(
        messages=[{"role": "user", "content": "hi"}], top_p=0.5
    ).sampling_params({})
    assert chat.sampling_params().temperature == SamplingParams().temperature


def test_engine_and_server_sample_with_the_models_values(tmp_path: Path, tiny_llama_dir: Path) -> None:
    """The model recommends temperature 0: requests that set none decode greedily, whatever their
    seed, in the engine (LLM.generate without params) and on the server."""
    from inprocess_app import loaded_client

    from kvspill.llm import LLM

    model = str(_model_dir(tmp_path, tiny_llama_dir, {"temperature": 0.0, "top_k": 5}))
    llm = LLM(model, device="cpu", max_model_len=64)
    assert llm.get_default_sampling_params() == SamplingParams(temperature=0.0, top_k=5)
    greedy = llm.generate("hello world", SamplingParams(temperature=0.0, top_k=5, max_tokens=8))[0].token_ids
    assert len(greedy) == 8  # no early eos: the texts compared below are 8 tokens
    assert llm.engine.config.generation_config == "auto"
    with loaded_client({"config": EngineConfig(model=model, device="cpu", max_model_len=64)}) as client:

        def text(**sampling: Any) -> str:
            body = {"model": "tiny", "prompt": "hello world", "max_tokens": 8, **sampling}
            return str(client.post("/v1/completions", json=body).json()["choices"][0]["text"])

        assert text(seed=1) == text(seed=2) == text(temperature=0.0) == llm.engine.tokenizer.decode(greedy)
        assert text(temperature=1.0, seed=1) != text(temperature=1.0, seed=2)  # the request's own wins
    none = LLM(model, device="cpu", max_model_len=64, generation_config="none")
    assert none.get_default_sampling_params() == SamplingParams()


def test_kvspill_chat_takes_the_models_values_where_no_flag_is_given(
    tmp_path: Path, tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from kvspill.cli import chat_session
    from kvspill.cli import main as cli_main

    seen: list[SamplingParams] = []

    class Recorder:
        def __init__(self, llm: Any, params: SamplingParams, system: str | None) -> None:
            seen.append(params)

        def run(self, *args: Any) -> None:
            return None

    monkeypatch.setattr(chat_session, "ChatSession", Recorder)
    monkeypatch.setattr(chat_session, "enable_line_editing", lambda: None)
    cli_main._register_commands()
    model = str(_model_dir(tmp_path, tiny_llama_dir, {"temperature": 0.2, "top_k": 7}))
    for flags in ([], ["--top-p", "0.5", "--top-k", "3"]):
        args = ["chat", "--model", model, "--device", "cpu", "--max-model-len", "64", *flags]
        result = CliRunner().invoke(cli_main.app, args)
        assert result.exit_code == 0, result.output
    # the model's temperature and top_k, chat's own top_p; then the flags win
    assert [(p.temperature, p.top_p, p.top_k) for p in seen] == [(0.2, 0.95, 7), (0.2, 0.5, 3)]
    bad = CliRunner().invoke(cli_main.app, ["chat", "--model", model, "--top-p", "0"])
    assert bad.exit_code != 0 and "top_p" in bad.output  # refused before the model loads
