"""HTTPS with --ssl-keyfile / --ssl-certfile (vLLM's flags; llama-server's --ssl-key-file and
--ssl-cert-file as aliases): a real server answers over TLS; a bad pair stops the start (exit 2)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest
from serve_app import serve_app
from typer.testing import CliRunner

from .conftest import start_server, stop_server

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    key, crt = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return key, crt


def test_the_server_answers_over_https(tiny_llama_dir: Path, cert, tmp_path: Path):
    key, crt = cert
    trust = ssl.create_default_context(cafile=str(crt))
    s = start_server(
        tiny_llama_dir,
        "--ssl-key-file",
        str(key),
        "--ssl-certfile",
        str(crt),
        log=tmp_path / "log",
        scheme="https",
        verify=trust,
    )
    try:
        assert s.url.startswith("https://")
        r = httpx.post(
            s.url + "/v1/completions",
            json={"prompt": "the cat", "max_tokens": 2},
            verify=trust,
            timeout=30,
        )
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
        with pytest.raises(httpx.HTTPError):
            httpx.get(s.url.replace("https://", "http://") + "/health", timeout=5)
    finally:
        stop_server(s)


@pytest.mark.parametrize(
    ("which", "message"),
    [
        ("key only", "give --ssl-certfile too"),
        ("missing", "does not exist"),
        ("swapped", "do not load as a certificate and its private key"),
    ],
)
def test_a_bad_pair_exits_2(tiny_llama_dir: Path, cert, tmp_path: Path, which: str, message: str):
    key, crt = cert
    args = {
        "key only": ["--ssl-keyfile", str(key)],
        "missing": ["--ssl-keyfile", str(tmp_path / "nope.pem"), "--ssl-certfile", str(crt)],
        "swapped": ["--ssl-keyfile", str(crt), "--ssl-certfile", str(key)],
    }[which]
    out = CliRunner().invoke(serve_app(), ["serve", str(tiny_llama_dir), *args, "--print-config"])
    assert out.exit_code == 2 and message in out.output, out.output
