"""`serve`, `generate` and `chat` get a hub id that is not on this machine through `kvspill pull`'s
core (`registry.pull.ensure_local_model`), unless --offline; the served name stays the id given."""

from __future__ import annotations

from typing import Any

import pytest
from serve_app import serve_app
from typer.testing import CliRunner

import kvspill.registry.pull as pull
from kvspill.cli import main as cli_main
from kvspill.cli import serve_cmd
from kvspill.errors import KvspillError, ModelNotFoundError


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch, tmp_path) -> list[tuple]:
    """ensure_local_model's calls; a hub id comes back as a local directory."""
    calls: list[tuple] = []

    def ensure(model: str | None, *, offline: bool, revision=None, download_dir=None) -> str | None:  # type: ignore[no-untyped-def]
        calls.append(
            (model, offline)
            if revision is None and download_dir is None
            else (model, offline, revision, download_dir)
        )
        if offline:
            raise ModelNotFoundError(f"{model} is not on this machine and --offline forbids downloading it")
        return str(tmp_path)

    monkeypatch.setattr(pull, "ensure_local_model", ensure)
    return calls


def test_serve_pulls_a_hub_id_and_serves_it_by_that_id(fetched, monkeypatch, tmp_path) -> None:
    served: list[tuple] = []
    monkeypatch.setattr(serve_cmd, "run_server", lambda *a: served.append(a))
    result = CliRunner().invoke(serve_app(), ["serve", "org/model:Q4_K_M"], env={})
    assert result.exit_code == 0, result.output
    assert fetched == [("org/model:Q4_K_M", False)]
    config, name = served[0][0], served[0][6]
    assert config.model == str(tmp_path) and name == "org/model:Q4_K_M"


def test_serve_offline_refuses_with_the_fix(fetched, monkeypatch) -> None:
    monkeypatch.setattr(serve_cmd, "run_server", lambda *a: pytest.fail("must not serve"))
    result = CliRunner().invoke(serve_app(), ["serve", "org/model", "--offline"], env={})
    assert result.exit_code == 2 and "--offline forbids downloading" in result.stderr
    assert fetched == [("org/model", True)]
    env = {"KVSPILL_OFFLINE": "1"}
    assert CliRunner().invoke(serve_app(), ["serve", "org/model"], env=env).exit_code == 2


def test_print_config_never_downloads(fetched) -> None:
    result = CliRunner().invoke(serve_app(), ["serve", "org/model", "--print-config"], env={})
    assert fetched == [] and 'model = "org/model"' in result.stdout


@pytest.mark.parametrize("command", [["generate", "hi"], ["chat"]])
def test_generate_and_chat_fetch_before_loading(fetched, monkeypatch, command, tmp_path) -> None:
    loaded: list[Any] = []

    def llm(model: Any, **kwargs: Any) -> Any:
        loaded.append(model)
        raise KvspillError("stopped by the test")

    monkeypatch.setattr("kvspill.llm.LLM", llm)
    result = CliRunner().invoke(cli_main.app, [*command, "--model", "org/model", "--offline"], env={})
    assert result.exit_code != 0 and fetched == [("org/model", True)] and loaded == []
    CliRunner().invoke(cli_main.app, [*command, "--model", "org/model"], env={})
    assert fetched[-1] == ("org/model", False) and loaded == [str(tmp_path)]


def test_serve_passes_vllms_revision_and_download_dir(fetched, monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(serve_cmd, "run_server", lambda *a: None)
    args = ["serve", "org/model", "--revision", "v1.1", "--download-dir", str(tmp_path / "m")]
    result = CliRunner().invoke(serve_app(), args, env={})
    assert result.exit_code == 0, result.output
    assert fetched == [("org/model", False, "v1.1", str(tmp_path / "m"))]
    env = {"KVSPILL_REVISION": "abc", "KVSPILL_DOWNLOAD_DIR": "/d"}
    assert CliRunner().invoke(serve_app(), ["serve", "org/model"], env=env).exit_code == 0
    assert fetched[-1] == ("org/model", False, "abc", "/d")
