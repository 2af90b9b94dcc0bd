"""Bench-suite fixtures: a scripted target (no engine), the CLI runner, and one real tiny server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from kvspill.bench.suites.targets import Reading, RequestSpec, RunResult


class ScriptedTarget:
    """A target whose outcome per request is `fail(spec, n)` (an error string or None), with
    host RSS `rss(n)` GiB after the n-th request: no engine, no timing, deterministic."""

    def __init__(
        self,
        fail: Callable[[RequestSpec, int], str | None] = lambda spec, n: None,
        rss: Callable[[int], float] = lambda n: 1.0,
        max_model_len: int | None = 4096,
    ) -> None:
        self.label, self.max_model_len = "scripted", max_model_len
        self.fail, self.rss = fail, rss
        self.calls: list[RequestSpec] = []
        self.closed = False

    def info(self) -> dict:
        return {"target": "scripted", "model": "scripted"}

    def run(self, specs: Sequence[RequestSpec]) -> list[RunResult]:
        out = []
        for spec in specs:
            self.calls.append(spec)
            err = self.fail(spec, len(self.calls))
            out.append(
                RunResult(ok=False, err=err)
                if err
                else RunResult(
                    ok=True, ttft_s=0.01, decode_tok_s=100.0, new_tokens=spec.new_tokens, e2e_s=0.1
                )
            )
        return out

    def read(self) -> Reading:
        return Reading(
            host_rss_gib=self.rss(len(self.calls)), bytes_moved={"gpu_to_cpu": 10 * len(self.calls)}
        )

    def reset_peak(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def _registry_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The suites keep their summaries in the registry: a test's go to its own folder, never the
    user's data dir."""
    monkeypatch.setenv("KVSPILL_DATA_DIR", str(tmp_path / "registry"))


@pytest.fixture
def scripted() -> type[ScriptedTarget]:
    return ScriptedTarget


@pytest.fixture
def bench(bench_app) -> Callable[..., object]:
    """Run `bench ARGS...` through the CLI; returns click's Result."""

    def invoke(*args: str) -> object:
        return CliRunner().invoke(bench_app(), ["bench", *args])

    return invoke


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def tiny_server(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`python -m kvspill.server` over the tiny Llama on loopback (CPU, fp32); yields its URL."""
    port = _free_port()
    log = tmp_path_factory.mktemp("bench_srv") / "server.log"
    cmd = [
        sys.executable,
        "-m",
        "kvspill.server",
        str(tiny_llama_dir),
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--port",
        str(port),
        "--max-model-len",
        "512",
    ]
    proc = subprocess.Popen(
        cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=dict(os.environ, KVSPILL_HOST="127.0.0.1")
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()}")
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not become healthy:\n{log.read_text()}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
