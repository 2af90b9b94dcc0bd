"""Other servers' flags on kvspill's command line (`kvspill/cli/dialects.py`): each vLLM, SGLang and
llama-server alias sets the EngineConfig field (or serve argument) it names and prints one `note:`
line; what cannot map is one `error:` line and exit 2. No model is loaded: `run_server` is replaced
and generate/chat stop right after their flags are read."""

from __future__ import annotations

import json
from typing import Any

import pytest
from serve_app import serve_app
from typer.testing import CliRunner

from kvspill.cli import main as cli_main
from kvspill.cli import serve_cmd
from kvspill.cli.dialects import ALIASES, DialectError, rewrite_args
from kvspill.config import EngineConfig
from kvspill.errors import KvspillError

GiB = 2**30
OFFLOAD = {
    "kv_connector": "OffloadingConnector",
    "kv_role": "kv_both",
    "kv_connector_extra_config": {"block_size": 64, "cpu_bytes_to_use": 8_000_000_000},
}


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    calls: list[tuple] = []
    monkeypatch.setattr(serve_cmd, "run_server", lambda *a: calls.append(a))
    return calls


def _serve(*args: str) -> Any:
    return CliRunner().invoke(serve_app(), ["serve", *args], env={})


def _served_config(served: list[tuple], *args: str) -> tuple[EngineConfig, list[str]]:
    result = _serve(*args)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    return served[-1][0], notes


@pytest.mark.parametrize(
    ("args", "field", "value", "note"),
    [
        (["--swap-space", "4"], "cpu_kv_budget_bytes", 4 * GiB, "--swap-space 4 (vLLM) read as --cpu-kv-budget 4GiB"),
        (["--swap-space=0.5"], "cpu_kv_budget_bytes", GiB // 2, "read as --cpu-kv-budget 0.5GiB"),
        (["--seed", "7"], "seed", 7, "--seed 7 (vLLM) read as --engine-seed 7"),
        (["--kv-transfer-config", json.dumps(OFFLOAD)], "cpu_kv_budget_bytes", 8_000_000_000,
         "(vLLM) read as --cpu-kv-budget 8000000000B"),
        (["--kv-offloading-size", "2"], "cpu_kv_budget_bytes", 2 * GiB, "read as --cpu-kv-budget 2GiB"),
        (["--mem-fraction-static", "0.6"], "gpu_memory_utilization", 0.6,
         "--mem-fraction-static 0.6 (SGLang) read as --gpu-memory-utilization 0.6"),
        (["--context-length", "2K"], "max_model_len", 2048, "(SGLang) read as --max-model-len 2K"),
        (["--chunked-prefill-size", "512"], "max_num_batched_tokens", 512,
         "(SGLang) read as --max-num-batched-tokens 512"),
        (["-c", "4096"], "max_model_len", 4096, "-c 4096 (llama-server) read as --max-model-len 4096"),
        (["--ctx-size", "1024"], "max_model_len", 1024, "read as --max-model-len 1024"),
        (["--ctx-size", "0"], "max_model_len", None, "accepted: 0 is the model's trained context"),
        (["--enable-chunked-prefill"], "max_num_batched_tokens", EngineConfig().max_num_batched_tokens,
         "--enable-chunked-prefill (vLLM) accepted: kvspill always chunks prefill"),
        (["--trust-remote-code"], "trust_remote_code", False,
         "--trust-remote-code (vLLM, SGLang) accepted: kvspill runs no code from a model repository"),
        (["--kv-offloading-backend", "native"], "cpu_kv_budget_bytes", None, "accepted: kvspill's own cpu tier"),
        (["--disable-log-requests"], "seed", EngineConfig().seed, "(vLLM) accepted: kvspill logs neither"),
        (["--disable-log-stats"], "seed", EngineConfig().seed, "(vLLM) accepted: kvspill logs neither"),
        (["--enable-auto-tool-choice"], "seed", EngineConfig().seed,
         "(vLLM) accepted: a chat request with tools has its tool calls read"),
        (["-ngl", "99"], "device", "auto", "-ngl 99 (llama-server) accepted: kvspill puts the weights on the GPU"),
        (["--n-gpu-layers", "0"], "device", "cpu", "read as --device cpu"),
        (["-fa"], "device", "auto", "-fa (llama-server) accepted"),
        (["-fa", "on"], "device", "auto", "-fa on (llama-server) accepted"),
        (["--flash-attn=off"], "device", "auto", "--flash-attn off (llama-server) accepted"),
        (["-np", "4"], "max_num_seqs", 4, "-np 4 (llama-server) read as --max-num-seqs 4"),
        (["-b", "1024"], "max_num_batched_tokens", 1024, "read as --max-num-batched-tokens 1024"),
        (["-ctk", "q8_0"], "kv_cache_dtype", "int8", "read as --kv-cache-dtype int8"),
        (["-ctv", "f16"], "kv_cache_dtype", "auto", "read as --kv-cache-dtype auto"),
        (["--jinja"], "device", "auto", "accepted: kvspill always renders the model's Jinja chat template"),
        (["--load-format", "safetensors"], "device", "auto", "(vLLM) accepted: kvspill reads a model's safetensors"),
        (["--tokenizer-mode=auto"], "device", "auto", "(vLLM) accepted: kvspill uses the model's Hugging Face"),
        (["-pp", "1"], "tensor_parallel_size", 1, "-pp 1 (vLLM) accepted: one pipeline stage"),
        (["--disable-custom-all-reduce"], "device", "auto", "accepted: kvspill's tensor-parallel all-reduce is NCCL's"),
    ],
)  # fmt: skip
def test_each_alias_sets_its_field_and_says_so(served, args, field, value, note):
    config, notes = _served_config(served, *args)
    assert getattr(config, field) == value
    assert len(notes) == 1 and note in notes[0], notes


def test_tensor_parallel_aliases_and_totals_split_per_gpu() -> None:
    """vLLM's offload sizes are over all GPUs, kvspill's --cpu-kv-budget is per GPU (rank)."""
    values = frozenset({"--tensor-parallel-size"})
    args, notes = rewrite_args("serve", ["-tp", "2", "--kv-offloading-size", "8"], values)
    assert args == ["--tensor-parallel-size", "2", "--cpu-kv-budget", "4GiB"]
    assert "per GPU" in notes[1]
    args, _ = rewrite_args("serve", ["--kv-transfer-config", json.dumps(OFFLOAD), "--tp-size", "4"], values)
    assert args == ["--cpu-kv-budget", "2000000000B", "--tensor-parallel-size", "4"]
    args, _ = rewrite_args("serve", ["--tensor-parallel-size", "2", "--swap-space", "3"], values)
    assert args[-2:] == ["--cpu-kv-budget", "3GiB"]  # vLLM's swap space is per GPU already


def test_model_path_is_the_model(served, tmp_path):
    model = str(tmp_path)  # a local path: serve would pull a hub id that is not here
    result = _serve("--model-path", model)
    assert result.exit_code == 0, result.output
    config, *_ignored, name = served[0][:7]
    assert config.model == model and name == model
    assert f"(SGLang) read as --model {model}" in result.stderr


def test_several_aliases_at_once_keep_the_other_flags(served):
    config, notes = _served_config(
        served, "--host", "0.0.0.0", "--swap-space", "1", "--seed", "3", "-c", "512", "--enforce-eager"
    )
    assert (config.cpu_kv_budget_bytes, config.seed, config.max_model_len) == (GiB, 3, 512)
    assert config.enforce_eager and served[-1][1] == "0.0.0.0" and len(notes) == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--no-enable-chunked-prefill"], "kvspill always chunks prefill; leave it out and set the chunk with "
         "--max-num-batched-tokens"),
        (["--chunked-prefill-size", "-1"], "give the chunk in tokens"),
        (["--kv-transfer-config", '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}'],
         "the LMCacheConnectorV1 connector is not supported"),
        (["--kv-transfer-config", '{"kv_connector": "NixlConnector"}'], "--cpu-kv-budget SIZE"),
        (["--kv-transfer-config", "{not json"], "--kv-transfer-config is not JSON"),
        (["--kv-transfer-config", json.dumps({**OFFLOAD, "kv_connector_extra_config": {"num_cpu_blocks": 100}})],
         "give the CPU size as cpu_bytes_to_use"),
        (["--kv-transfer-config", json.dumps({**OFFLOAD, "kv_ip": "1.2.3.4"})], "the keys ['kv_ip']"),
        (["--kv-transfer-config", json.dumps({**OFFLOAD, "kv_connector_extra_config": {
            "cpu_bytes_to_use": 1, "spec_name": "TieringOffloadingSpec"}})], "--disk-kv-budget SIZE"),
        (["--kv-offloading-backend", "lmcache"], "no lmcache backend"),
        (["--swap-space", "lots"], "--swap-space takes a number of GiB"),
        (["--swap-space", "4", "--cpu-kv-budget", "8GiB"], "both set --cpu-kv-budget: give one of them"),
        (["--context-length", "4K", "-c", "8K"], "both set --max-model-len"),
        (["--seed", "1", "--engine-seed", "2"], "both set --engine-seed"),
        (["--model-path", "a", "-m", "b"], "both set --model"),
        (["--swap-space"], "--swap-space (vLLM) needs a value"),
        (["--trust-remote-code=true"], "takes no value"),
        (["--enable-log-requests"], "no log of requests' contents"),
        (["-ngl", "many"], "takes a number of layers"),
        (["-ctk", "q4_0"], "give one of f16, bf16, q8_0"),
        (["-ctk", "q8_0", "-ctv", "f16"], "give both the same type"),
        (["-ctk", "f16", "--kv-cache-dtype", "fp8"], "both set the KV type"),
        (["-t", "8"], "kvspill sizes its CPU threads itself"),
        (["-nocb"], "always batches continuously"),
        (["-np", "2", "--max-num-seqs", "4"], "both set --max-num-seqs"),
        (["--tool-call-parser", "pythonic"], "give one of those"),
        (["--load-format", "pt"], "kvspill loads safetensors and GGUF files only"),
        (["--load-format", "dummy"], "give the model as random:<shape>"),
        (["--tokenizer-mode", "mistral"], "give another with --tokenizer"),
        (["--pipeline-parallel-size", "2"], "give --tensor-parallel-size N instead"),
    ],
)  # fmt: skip
def test_what_cannot_map_is_one_error_line(served, args, message):
    result = _serve(*args)
    assert result.exit_code == 2 and not served
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr, result.stderr


def test_values_of_other_options_and_arguments_after_dashdash_are_not_aliases() -> None:
    values = frozenset({"--stop"})
    args, notes = rewrite_args("generate", ["--stop", "-c", "--", "-c"], values)
    assert args == ["--stop", "-c", "--", "-c"] and notes == []
    args, notes = rewrite_args("generate", ["--stop=-c", "-c", "8"], values)
    assert args == ["--stop=-c", "--max-model-len", "8"] and len(notes) == 1


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """generate/chat stop after their flags are read: (model, engine options) per call."""
    calls: list[tuple] = []

    def make(model: Any, engine: Any, offline: bool) -> Any:
        calls.append((model, engine))
        raise KvspillError("stopped by the test")

    monkeypatch.setattr(cli_main, "_make_llm", make)
    cli_main._register_commands()
    return calls


@pytest.mark.parametrize("command", [["generate", "hi"], ["chat"]])
def test_generate_and_chat_take_the_engine_aliases_but_keep_their_own_seed(made, command):
    args = [*command, "-c", "2K", "--swap-space", "1", "--model-path", "m", "--seed", "5"]
    result = CliRunner().invoke(cli_main.app, args, env={})
    assert "stopped by the test" in result.stderr, result.output
    model, engine = made[0]
    assert (model, engine.max_model_len, engine.cpu_kv_budget, engine.engine_seed) == (
        "m",
        "2K",
        "1GiB",
        None,
    )
    assert result.stderr.count("note: ") == 3  # --seed stays generate's and chat's sampling seed


def test_seed_is_only_an_alias_of_serve() -> None:
    args, notes = rewrite_args("generate", ["--seed", "5"], frozenset({"--seed"}))
    assert args == ["--seed", "5"] and notes == []
    with pytest.raises(DialectError, match="--no-enable-chunked-prefill"):
        rewrite_args("chat", ["--no-enable-chunked-prefill"], frozenset())


def test_version_on_the_top_level_and_on_serve(served):
    from importlib.metadata import version

    import kvspill

    cli_main._register_commands()
    top = CliRunner().invoke(cli_main.app, ["--version"])
    assert top.exit_code == 0 and top.stdout == f"{kvspill.__version__}\n"
    serve = _serve("--version", "--swap-space", "4")
    assert serve.exit_code == 0 and serve.stdout == f"{kvspill.__version__}\n" and not served
    assert kvspill.__version__ == version("kvspill")  # what GET /version answers


def test_every_alias_is_documented_in_flags_md() -> None:
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "flags.md").read_text()
    aliases = text.split("## Aliases", 1)[1].split("\n## ", 1)[0]
    for alias in ALIASES:
        assert all(f"`{name}`" in aliases for name in alias.names), alias.names


def test_tool_call_parser_reaches_the_server(served):
    assert _serve("--enable-auto-tool-choice", "--tool-call-parser", "llama3_json").exit_code == 0
    assert served[-1][11] == ("auto", "llama3_json")  # run_server's parsers: (reasoning, tool calls)


def test_a_llama_server_line(served, tmp_path):
    """The line a llama-server user brings: each flag read, K and V types from one -ctk/-ctv pair."""
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    result = _serve(
        "-c", "4096", "-ngl", "999", "-fa", "on", "-np", "4", "--jinja", "-ctk", "q8_0", "-ctv", "q8_0",
        "-a", "coder", "--chat-template-file", str(template), "--port", "8081",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    config, settings = served[-1][0], served[-1]
    assert (config.max_model_len, config.max_num_seqs, config.kv_cache_dtype) == (4096, 4, "int8")
    assert settings[2] == 8081 and settings[6] == "coder"
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert len(notes) == 9 and any("-ctv q8_0 (llama-server) accepted: the same type" in n for n in notes)


def test_llama_cli_sampling_flags_on_generate_and_chat() -> None:
    args, notes = rewrite_args("generate", ["-p", "hi there", "-n", "8", "--temp", "0.5"], frozenset())
    assert args == ["hi there", "--max-tokens", "8", "--temperature", "0.5"] and len(notes) == 3
    args, _ = rewrite_args("chat", ["-n", "8"], frozenset())
    assert args == ["--max-tokens", "8"]
    assert rewrite_args("serve", ["-n", "8"], frozenset())[0] == ["-n", "8"]  # not serve's
    with pytest.raises(DialectError, match="after --"):
        rewrite_args("generate", ["-p", "-x"], frozenset())
