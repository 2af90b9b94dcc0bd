"""Real server processes on loopback over the tiny Llama (CPU), one per module that needs it."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest


@dataclass
class Server:
    url: str
    model: str
    proc: subprocess.Popen


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    model_dir: Path,
    *flags: str,
    log: Path,
    env: dict[str, str] | None = None,
    scheme: str = "http",
    verify: ssl.SSLContext | bool = True,
) -> Server:
    """A `kvspill serve` process on a free port, once /health answers (`verify`: httpx's, for https)."""
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "kvspill.server",
        str(model_dir),
        "--device",
        "cpu",
        "--port",
        str(port),
        *flags,
    ]
    env = dict(os.environ, KVSPILL_HOST="127.0.0.1", **(env or {}))
    # One OpenMP thread: on a 2-core machine shared with the test process (and whatever else runs),
    # two torch threads stall each other for a scheduler tick per op and a 1 ms step becomes 100 ms.
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
    url = f"{scheme}://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(url + "/health", timeout=1, verify=verify).status_code == 200:
                return Server(url, str(model_dir), proc)
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"server did not become healthy:\n{log.read_text()}")


def stop_server(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(15)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait(5)


@pytest.fixture(scope="module")
def server(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tiny_llama_dir, log=tmp_path_factory.mktemp("srv") / "server.log")
    yield s
    stop_server(s)
