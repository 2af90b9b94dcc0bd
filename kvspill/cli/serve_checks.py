"""What `kvspill serve` checks before it binds its port, so a server that cannot work never
listens: the port, the model (found, an architecture kvspill runs), and the budget flags against
the host (a cpu tier within the available RAM, a disk tier in a writable directory with room
for it, a VRAM budget within the card: `engine/host_budgets.py`).

Invariant: every failure is a KvspillError whose one-line message says what to change; the CLI
prints it and exits 1. Checks are cheap (headers and config.json, no weights).
"""

from __future__ import annotations

import errno
import json
import socket
from pathlib import Path

from kvspill.config import EngineConfig
from kvspill.engine.host_budgets import check_budgets
from kvspill.errors import KvspillError, UnsupportedModelError


def check_before_binding(config: EngineConfig, host: str, port: int) -> None:
    check_port(host, port)
    check_model(config.model)
    check_budgets(config)  # the cpu, disk and VRAM budgets against this host (engine/host_budgets.py)
    if config.kv_persist_dir is not None:
        from kvspill.storage.persist import usable_dir

        usable_dir(Path(config.kv_persist_dir))


def check_port_number(port: int) -> None:
    if not 0 <= port < 65536:
        raise KvspillError(f"--port {port} is not a TCP port: give one from 0 (any free port) to 65535")


def check_port(host: str, port: int) -> None:
    check_port_number(port)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            s.bind((host, port))
        except OSError as e:
            hint = (
                "another process listens there: stop it or pick another --port"
                if e.errno == errno.EADDRINUSE
                else "check --host and --port"
            )
            raise KvspillError(f"cannot listen on {host}:{port}: {e.strerror or e}: {hint}") from e


def check_model(model: str | None) -> None:
    """Found (ModelNotFoundError) and an architecture kvspill runs (a Hugging Face directory's
    config.json, a GGUF file's header)."""
    if model is not None and model.startswith("random:"):
        return
    from kvspill.model.registry import supported_architectures, supported_model_types
    from kvspill.model.resolve import resolve_model

    resolved = resolve_model(model)
    if resolved.kind == "gguf":
        from kvspill.gguf.header import read_header

        arch = read_header(resolved.path).architecture  # read (and cached) by resolve_model
        if arch is not None and arch not in supported_model_types():
            raise UnsupportedModelError(
                f"{resolved.display_name} is a GGUF of architecture {arch!r}, which kvspill does not "
                f"run; it runs: {', '.join(supported_model_types())}"
            )
        return
    config = json.loads((resolved.path / "config.json").read_text(encoding="utf-8"))

    archs = config.get("architectures") or []
    if archs and archs[0] not in supported_architectures():
        raise UnsupportedModelError(
            f"{resolved.display_name} is a {archs[0]} (model_type {config.get('model_type')!r}), an "
            f"architecture kvspill does not run; it runs: {', '.join(supported_architectures())}"
        )
