"""`kvspill serve --config FILE` / KVSPILL_CONFIG (`kvspill/cli/config_file.py`): any serve flag from a
TOML file; precedence flag > env > file > default; a bad file is one `error:` line and exit 2;
`--print-config` shows each value and where it came from. No model is loaded here."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from serve_app import serve_app
from typer.testing import CliRunner

from kvspill.cli import serve_cmd
from kvspill.config import EngineConfig


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    calls: list[tuple] = []
    monkeypatch.setattr(serve_cmd, "run_server", lambda *a: calls.append(a))
    return calls


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "serve.toml"
    path.write_text(text)
    return path


def _serve(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(serve_app(), ["serve", *args], env=env or {})


SAMPLE = """
model = "from-file"
host = "0.0.0.0"
port = 9000
shutdown-timeout = 5
vram-budget = "1GiB"
cold_attention = "cpu"
enforce-eager = true
hot-window-tokens = 64
"""


def test_the_file_sets_serve_and_engine_flags(tmp_path, served):
    result = _serve("--config", str(_write(tmp_path, SAMPLE)))
    assert result.exit_code == 0, result.output
    config, host, port, _key, _waiting, shutdown_timeout, name = served[0][:7]
    assert (config.model, host, port, shutdown_timeout, name) == (
        "from-file",
        "0.0.0.0",
        9000,
        5.0,
        "from-file",
    )
    assert config.vram_budget_bytes == 2**30 and config.cold_attention == "cpu"
    assert config.enforce_eager and config.hot_window_tokens == 64
    assert config.block_size == EngineConfig().block_size  # not in the file: the default


def test_precedence_is_flag_then_env_then_file_then_default(tmp_path, served):
    path = _write(tmp_path, SAMPLE)
    env = {"KVSPILL_CONFIG": str(path), "KVSPILL_PORT": "9100", "KVSPILL_HOT_WINDOW_TOKENS": "32"}
    result = _serve("--hot-window-tokens", "16", "--no-enforce-eager", env=env)
    assert result.exit_code == 0, result.output
    config, host, port = served[0][:3]
    assert config.hot_window_tokens == 16  # flag over env over file
    assert port == 9100  # env over file
    assert host == "0.0.0.0" and config.cold_attention == "cpu"  # file over default
    assert not config.enforce_eager  # a --no- flag over the file's true
    assert served[0][5] == 5.0  # KVSPILL_CONFIG found the file


def test_a_flag_names_the_file_over_kvspill_config(tmp_path, served):
    other = tmp_path / "other.toml"
    other.write_text("port = 7000\n")
    result = _serve("--config", str(other), env={"KVSPILL_CONFIG": str(_write(tmp_path, SAMPLE))})
    assert result.exit_code == 0, result.output
    assert served[0][2] == 7000 and served[0][1] == "127.0.0.1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'vram_budgett = "1GiB"',
            "unknown key 'vram_budgett' (did you mean 'vram-budget'?); valid keys: allowed-hosts, allowed-origins,",
        ),
        ("config = 'x.toml'", "unknown key 'config'"),
        ("port = 9.5", "'port' must be an integer, got 9.5"),
        ("port = true", "'port' must be a number, got True"),
        ("enforce-eager = 'yes'", "'enforce-eager' must be true or false, got 'yes'"),
        ("port = 'x'", "'port' must be an integer"),
        ("[serve]\nport = 1", "unknown key 'serve'"),
        ("port = 1\nport = 2", "is not valid TOML"),
        ("port = 1\n[port]", "is not valid TOML"),
        ("host = '0.0.0.0'\nhost-x = 1", "unknown key 'host-x'"),
        ("max_waiting_requests = 1\nmax-waiting-requests = 2", "'max-waiting-requests' is set twice"),
    ],
)
def test_a_bad_file_is_one_line_naming_it_and_exit_2(tmp_path, served, text, message):
    path = _write(tmp_path, text)
    result = _serve("--config", str(path))
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: config file {path}") and message in result.output, result.output
    assert result.output.count("\n") == 1 and not served


def test_a_missing_file_is_named(tmp_path, served):
    result = _serve(env={"KVSPILL_CONFIG": str(tmp_path / "nope.toml")})
    assert result.exit_code == 2 and "nope.toml: no such file" in result.output, result.output


def test_a_bad_value_in_the_file_is_refused_like_a_flag(tmp_path, served):
    result = _serve("--config", str(_write(tmp_path, 'cold-attention = "bogus"')))
    assert (
        result.exit_code == 2
        and "--cold-attention must be auto, cpu, stream, split or sparse" in result.output
    )
    assert not served


def test_print_config_says_where_each_value_came_from_and_is_a_config_file(tmp_path, served):
    path = _write(tmp_path, SAMPLE + 'api-key = "secret"\n')
    env = {"KVSPILL_PORT": "9100"}
    result = _serve("--config", str(path), "--device", "cpu", "--print-config", env=env)
    assert result.exit_code == 0, result.output
    assert not served, "--print-config only prints"
    lines = result.output.splitlines()
    assert f'host = "0.0.0.0"  # config file {path}' in lines
    assert "port = 9100  # environment KVSPILL_PORT" in lines
    assert 'device = "cpu"  # command line' in lines
    assert "max-waiting-requests = 64  # default" in lines
    # unset: EngineConfig's default, quoted
    assert (
        "# block-size = (16; 8 with --cold-attention sparse and a --sparse-budget-tokens under 1024)  # default"
        in lines
    )
    assert "secret" not in result.output and f"# api-key = (set, not shown)  # config file {path}" in lines
    # What it prints is a config file that gives the same configuration.
    printed = tomllib.loads(result.output)
    again = tmp_path / "printed.toml"
    again.write_text(result.output)
    assert _serve("--config", str(again), env=env).exit_code == 0
    assert _serve("--config", str(path), "--device", "cpu", env=env).exit_code == 0
    assert served[0][0] == served[1][0] and served[0][1:3] == served[1][1:3]
    assert printed["device"] == "cpu" and printed["enforce-eager"] is True


def test_print_config_of_a_bad_value_prints_then_fails(tmp_path, served):
    result = _serve("--block-size", "7", "--print-config")
    assert result.exit_code == 2
    assert "block-size = 7  # command line" in result.output
    assert "error: --block-size must be 8, 16, 32, 64 or 128, got 7" in result.output


def test_a_size_without_a_unit_says_which_units(tmp_path, served):
    """`vram-budget = 24` (or --vram-budget 24) meant 24 bytes before: now one line naming the units."""
    result = _serve("--config", str(_write(tmp_path, "vram-budget = 24\n")))
    assert result.exit_code == 2
    assert "--vram-budget: '24' has no unit: write 24GiB" in result.output and not served
