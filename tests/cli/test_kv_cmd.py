"""`kvspill kv ls|lookup|pin|unpin|move|clear|check` against a server: the tiny Llama (CPU) served
in-process, the command's HTTP calls routed to it through a TestClient (no server process)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from inprocess_app import loaded_client
from typer.testing import CliRunner

from kvspill.cli import kv_cmd
from kvspill.cli.main import _register_commands, app

PROMPT = [(i * 7) % 200 + 3 for i in range(60)]  # 7 full blocks of 8


@pytest.fixture(scope="module")
def server(tiny_llama_dir: Path) -> Iterator[TestClient]:
    options = dict(
        model=str(tiny_llama_dir), device="cpu", dtype="float32", block_size=8, max_model_len=256,
        num_kv_blocks=16, num_cpu_kv_blocks=32, hot_window_tokens=16, max_num_batched_tokens=64,
    )  # fmt: skip
    with loaded_client(options, api_key="k") as c:
        r = c.post(
            "/v1/completions", json={"prompt": PROMPT, "max_tokens": 2}, headers={"Authorization": "Bearer k"}
        )
        assert r.status_code == 200, r.text
        yield c


@pytest.fixture
def kv(server: TestClient, monkeypatch: pytest.MonkeyPatch):
    """Runs `kvspill kv ARGS --url http://test --api-key k`, its requests answered by `server`."""

    def through_test_client(
        url: str, path: str, api_key: str | None, body: dict[str, Any] | None = None
    ) -> Any:
        assert url == "http://test"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        r = (
            server.get(path, headers=headers)
            if body is None
            else server.post(path, json=body, headers=headers)
        )
        if r.status_code >= 400:
            raise kv_cmd.ServerRefused(f"{r.status_code}: {r.json()['error']['message']}")
        return r.json()

    monkeypatch.setattr(kv_cmd, "request", through_test_client)
    _register_commands()

    def run(*args: str, key: str = "k"):
        return CliRunner().invoke(app, ["kv", *args, "--url", "http://test", "--api-key", key])

    return run


def test_ls_lookup_move_pin_clear(kv) -> None:
    ls = kv("ls", "--json")
    assert ls.exit_code == 0, ls.output
    (row,) = json.loads(ls.stdout)
    prefix = row["prefix"]
    assert row["tokens"] >= 56
    table = kv("ls")
    assert table.exit_code == 0 and prefix in table.stdout and "pinned" in table.stdout.splitlines()[0]
    ids = ",".join(map(str, PROMPT))
    lookup = kv("lookup", "--token-ids", ids)
    assert lookup.exit_code == 0, lookup.output
    assert lookup.stdout.startswith("56 of 60 tokens cached") and f"prefix {prefix}" in lookup.stdout
    moved = kv("move", prefix, "cpu")
    assert moved.exit_code == 0 and moved.stdout.startswith(f"move {prefix} in the cpu tier: "), moved.output
    assert json.loads(kv("lookup", "--token-ids", ids, "--json").stdout)["tiers"]["cpu"] == 56
    pinned = kv("pin", prefix, "gpu")
    assert pinned.exit_code == 0 and "pin" in pinned.stdout, pinned.output
    assert json.loads(kv("ls", "--json").stdout)[0]["pinned"] == "gpu"
    assert kv("unpin", prefix, "gpu").exit_code == 0
    cleared = kv("clear", "--all")
    assert cleared.exit_code == 0 and cleared.stdout.startswith("clear every prefix"), cleared.output
    assert "no cached prefixes" in kv("ls").stdout
    check = kv("check")
    assert check.exit_code == 0 and check.stdout.count("ok  ") == 2, check.output


def test_refusals_are_one_error_line_and_exit_1_bad_arguments_exit_2(kv) -> None:
    unknown = kv("pin", "00000000deadbeef", "cpu")
    assert unknown.exit_code == 1 and "error: 404: no cached prefix '00000000deadbeef'" in unknown.output
    no_disk = kv("move", "00000000deadbeef", "disk")
    assert no_disk.exit_code == 1 and "no disk tier" in no_disk.output
    assert kv("ls", key="wrong").exit_code == 1
    assert kv("clear").exit_code == 2 and "PREFIX or --all" in kv("clear").output
    assert kv("lookup").exit_code == 2
    assert kv("lookup", "--token-ids", "1,x").exit_code == 2


def test_an_unreachable_server_says_how_to_start_one() -> None:
    _register_commands()
    result = CliRunner().invoke(app, ["kv", "ls", "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 1 and "no kvspill server at http://127.0.0.1:9" in result.output


def test_doctor_url_runs_the_cache_api_smoke(kv) -> None:
    # the seed's test_window_service: `kvspill doctor --url` checks the host and asks the server
    from typer.testing import CliRunner

    from kvspill.cli import main as cli_main

    cli_main._register_commands()
    result = CliRunner().invoke(cli_main.app, ["doctor", "--url", "http://test", "--api-key", "k"])
    assert "ok  GET /v1/kv/prefixes" in result.stdout and "ok  POST /v1/kv/lookup" in result.stdout, (
        result.output
    )
