"""`kvspill pull` and `kvspill models ls|rm|scan` from the shell, against a local Hub.

In-process runs point huggingface_hub's endpoint and cache at the test's (it reads HF_ENDPOINT and
HF_HUB_CACHE once, at import); one run in a child process sets the real environment variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import constants
from registry.hub_server import Hub
from typer.testing import CliRunner

from kvspill.cli.main import _register_commands, app
from kvspill.model.resolve import resolve_model
from kvspill.registry import open_registry


@pytest.fixture
def cli(hub: Hub, monkeypatch: pytest.MonkeyPatch):
    """`cli(*args)`: run `kvspill ARGS --data-dir DATA` with the Hub and the cache of `hub`."""
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}"
    )
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub.cache))
    _register_commands()

    def run(*args: str):
        return CliRunner().invoke(app, [*args, "--data-dir", str(hub.data)])

    return run


def _blobs(hub: Hub, repo: str) -> int:
    blobs = hub.cache / f"models--{repo.replace('/', '--')}" / "blobs"
    return sum(p.stat().st_size for p in blobs.iterdir()) if blobs.is_dir() else 0


def test_pull_ls_rm(cli, hub: Hub, tiny_llama_dir: Path):
    out = cli("pull", "org/tiny")
    assert out.exit_code == 0, out.output
    assert "pulled org/tiny: safetensors, float32" in out.output and "kvspill serve org/tiny" in out.output
    listing = json.loads(cli("models", "ls", "--json").output)["models"]
    assert [(m["name"], m["kind"]) for m in listing] == [
        ("SmolLM2-135M-Instruct", "embedded"),
        ("org/tiny", "pulled"),
    ]
    on_disk = _blobs(hub, "org/tiny")
    assert on_disk == sum(p.stat().st_size for p in tiny_llama_dir.iterdir())
    out = cli("models", "rm", "org/tiny")
    assert out.exit_code == 0 and f"({on_disk} bytes)" in out.output, out.output
    assert _blobs(hub, "org/tiny") == 0 and open_registry(hub.data).find_model("org/tiny") is None


def test_rm_one_gguf_of_a_repo_keeps_the_other(cli, hub: Hub):
    assert cli("pull", "org/tiny-GGUF:Q4_K_M").exit_code == 0
    assert cli("pull", "org/tiny-GGUF:Q8_0").exit_code == 0
    sizes = {
        tag: hub.state.repos["org/tiny-GGUF"][f"tiny-{tag}.gguf"].stat().st_size for tag in ("Q4_K_M", "Q8_0")
    }
    out = cli("models", "rm", "org/tiny-GGUF:Q4_K_M")
    assert f"({sizes['Q4_K_M']} bytes)" in out.output, out.output
    kept = open_registry(hub.data).model("org/tiny-GGUF:Q8_0").source
    assert resolve_model(kept).kind == "gguf" and _blobs(hub, "org/tiny-GGUF") == sizes["Q8_0"]
    out = cli("models", "rm", "org/tiny-GGUF:Q8_0")  # the last one: the whole revision goes
    assert f"({sizes['Q8_0']} bytes)" in out.output, out.output
    assert _blobs(hub, "org/tiny-GGUF") == 0


def test_rm_of_the_embedded_and_of_a_local_model(cli, smollm2_gguf_path: Path):
    out = cli("models", "rm", "SmolLM2-135M-Instruct")
    assert out.exit_code == 2 and "is the embedded model" in out.output and "cannot be removed" in out.output
    assert cli("models", "add", str(smollm2_gguf_path), "--name", "mine").exit_code == 0
    out = cli("models", "rm", "mine")
    assert out.exit_code == 0 and f"its files stay at {smollm2_gguf_path}" in out.output
    assert smollm2_gguf_path.is_file()


def test_pull_refuses_what_kvspill_cannot_run(cli, hub: Hub, tmp_path: Path, tiny_llama_dir: Path):
    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    (gpt2 / "config.json").write_text(
        json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"})
    )
    hub.state.repos["org/gpt2"] = {
        "config.json": gpt2 / "config.json",
        "model.safetensors": tiny_llama_dir / "model.safetensors",
    }
    out = cli("pull", "org/gpt2")
    assert out.exit_code == 1 and "kvspill cannot run it: " in out.output and "GPT2LMHeadModel" in out.output
    assert open_registry(hub.data).find_model("org/gpt2") is None
    out = cli("pull", "org/nope")
    assert out.exit_code == 2 and "no model org/nope on http://127.0.0.1" in out.output


def test_scan_skips_embedding_models(cli, tmp_path: Path, tiny_llama_dir: Path):
    root = tmp_path / "models"
    embed = root / "all-MiniLM"
    embed.mkdir(parents=True)
    (embed / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    (embed / "modules.json").write_text("[]")
    (embed / "model.safetensors").symlink_to(tiny_llama_dir / "model.safetensors")
    (root / "llama").symlink_to(tiny_llama_dir, target_is_directory=True)
    out = cli("models", "scan", str(root), "--no-hf-cache")
    assert out.exit_code == 0, out.output
    assert f"added {tiny_llama_dir.name}" in out.output  # named by the folder the link points at
    assert "skipped" in out.output and "all-MiniLM: an embedding model, not an LLM" in out.output
    assert "modules.json" in out.output
    assert [m.name for m in open_registry(tmp_path / "data").models()] == [tiny_llama_dir.name]


def test_pull_reads_hf_endpoint_and_hf_hub_cache(hub: Hub):
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "HF_HUB_CACHE": str(hub.cache),
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HUB_OFFLINE": "0",  # another test of this worker may have set it in its environment
    }
    args = [
        sys.executable,
        "-m",
        "kvspill.cli.main",
        "pull",
        "org/tiny-GGUF:Q8_0",
        "--data-dir",
        str(hub.data),
    ]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "pulled org/tiny-GGUF:Q8_0: gguf, Q8_0" in done.stdout
    source = open_registry(hub.data).model("org/tiny-GGUF:Q8_0").source
    assert f"`kvspill serve {source}`" in done.stdout
    assert source.startswith(str(hub.cache)) and hub.state.fetched() == {"tiny-Q8_0.gguf"}
