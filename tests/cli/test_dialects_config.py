"""`kvspill serve --config x.yaml` in vLLM's YAML form (`kvspill/cli/config_file.py`): keys are flag
names (dashes or underscores) and `model`; vLLM's and SGLang's names go through the alias table
(`cli/dialects.py`) with a `note:` each; precedence as for TOML: command line > env > file."""

from __future__ import annotations

from pathlib import Path

import pytest
from serve_app import serve_app
from typer.testing import CliRunner

from kvspill.cli import serve_cmd

GiB = 2**30

VLLM_YAML = """\
model: from-yaml
host: 0.0.0.0
port: 9000
served-model-name: my-model
gpu_memory_utilization: 0.8
max-model-len: 4096
enforce-eager: true
swap-space: 2
seed: 11
enable-chunked-prefill: true
trust-remote-code: true
kv-transfer-config:
  kv_connector: OffloadingConnector
  kv_role: kv_both
  kv_connector_extra_config: {cpu_bytes_to_use: 1000000000}
"""


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    calls: list[tuple] = []
    monkeypatch.setattr(serve_cmd, "run_server", lambda *a: calls.append(a))
    return calls


def _write(tmp_path: Path, text: str, name: str = "serve.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _serve(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(serve_app(), ["serve", *args], env=env or {})


def test_a_vllm_yaml_file_sets_serve_and_engine_flags(tmp_path, served):
    text = VLLM_YAML.replace("swap-space: 2\n", "")  # the connector JSON sets the cpu tier here
    path = _write(tmp_path, text)
    result = _serve("--config", str(path))
    assert result.exit_code == 0, result.output
    config, host, port, *_rest, name = served[0][:7]
    assert (config.model, host, port, name) == ("from-yaml", "0.0.0.0", 9000, "my-model")
    assert config.gpu_memory_utilization == 0.8 and config.max_model_len == 4096 and config.enforce_eager
    assert config.seed == 11 and config.cpu_kv_budget_bytes == 1_000_000_000
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert len(notes) == 4 and all(n.startswith(f"note: config file {path}: ") for n in notes)
    assert "seed: 11 (vLLM) read as --engine-seed 11" in result.stderr


def test_sglang_and_llama_server_names_in_a_file(tmp_path, served):
    path = _write(
        tmp_path, "model_path: m\nmem_fraction_static: 0.7\nchunked-prefill-size: 256\nctx-size: 2048\n"
    )
    result = _serve("--config", str(path))
    assert result.exit_code == 0, result.output
    config = served[0][0]
    assert (config.model, config.gpu_memory_utilization) == ("m", 0.7)
    assert (config.max_num_batched_tokens, config.max_model_len) == (256, 2048)


def test_toml_files_take_the_same_aliases(tmp_path, served):
    path = _write(tmp_path, 'swap-space = 3\ncontext-length = "1K"\n', "serve.toml")
    result = _serve("--config", str(path))
    assert result.exit_code == 0, result.output
    assert (served[0][0].cpu_kv_budget_bytes, served[0][0].max_model_len) == (3 * GiB, 1024)


def test_precedence_is_flag_then_env_then_yaml_file(tmp_path, served):
    path = _write(tmp_path, VLLM_YAML.replace("kv-transfer-config:", "unused:").split("unused:")[0])
    env = {"KVSPILL_CONFIG": str(path), "KVSPILL_PORT": "9100", "KVSPILL_ENGINE_SEED": "12"}
    result = _serve("--swap-space", "5", "--no-enforce-eager", env=env)
    assert result.exit_code == 0, result.output
    config, host, port = served[0][:3]
    assert config.cpu_kv_budget_bytes == 5 * GiB  # an alias on the command line over the file's alias
    assert config.seed == 12 and port == 9100  # env over the file (its seed: and port:)
    assert not config.enforce_eager and host == "0.0.0.0" and config.max_model_len == 4096


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("enable-chunked-prefill: false\n", "kvspill always chunks prefill"),
        ("swap-space: 2\ncpu-kv-budget: 4GiB\n", "'swap-space' and 'cpu-kv-budget' both set cpu-kv-budget"),
        ("context-length: 1024\nctx_size: 2048\n", "both set max-model-len"),
        ("kv-transfer-config: {kv_connector: LMCacheConnectorV1}\n", "connector is not supported"),
        ("seed: abc\n", "'seed' must be an integer"),
        ("swap-space: true\n", "takes a value"),
        ("trust-remote-code: yes please\n", "must be true or false"),
        ("max-model-len: [1, 2]\n", "'max-model-len' must be a string"),
        ("gpu-memory-utilisation: 0.8\n", "did you mean 'gpu-memory-utilization'"),
        ("- a list\n", "the top level must be a mapping"),
        ("port: [unclosed\n", "is not valid YAML"),
        ("version: true\n", "unknown key 'version'"),  # an action, not a setting
    ],
)
def test_a_bad_yaml_file_is_one_line_naming_it(tmp_path, served, text, message):
    path = _write(tmp_path, text)
    result = _serve("--config", str(path))
    assert result.exit_code == 2 and not served, result.output
    assert result.stderr.startswith(f"error: config file {path}") and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1


def test_trust_remote_code_false_and_an_empty_file_are_fine(tmp_path, served):
    assert _serve("--config", str(_write(tmp_path, "trust_remote_code: false\n"))).exit_code == 0
    empty = _write(tmp_path, "", "empty.yml")
    assert _serve("--config", str(empty)).exit_code == 0 and len(served) == 2


def test_print_config_of_a_yaml_file_is_a_valid_toml_config(tmp_path, served):
    path = _write(tmp_path, "swap-space: 2\nport: 9001\n")
    result = _serve("--config", str(path), "--print-config", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert f'cpu-kv-budget = "2GiB"  # config file {path}' in result.stdout
    assert f"port = 9001  # config file {path}" in result.stdout
