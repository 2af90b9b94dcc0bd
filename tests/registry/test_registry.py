"""The model registry: CRUD, versioned migrations, scan, profiles and `kvspill models`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvspill.cli.models_cmd import models_app
from kvspill.options import EngineOptions
from kvspill.registry import open_registry
from kvspill.registry.profiles import apply_profile, serve_args, validate_flags
from kvspill.registry.scan import scan_directory
from kvspill.registry.sources import inspect_source
from kvspill.registry.store import MIGRATIONS, SCHEMA_VERSION, ModelEntry, Registry, RegistryError


def _entry(name: str, source: str = "/m.gguf") -> ModelEntry:
    return ModelEntry(name, source, "gguf", "gguf", "Q4_1", 123, 1.0)


def test_the_embedded_model_is_listed_found_and_kept(tmp_path: Path, smollm2_gguf_path: Path):
    """A fresh registry (the dashboard's /api/models, `models ls`) lists the embedded model; its
    name finds it for profiles, plans and starts; it cannot be removed; a stored row with its
    file or name stands in for it."""
    reg = open_registry(tmp_path)
    listed = reg.listed_models()
    assert [(m.name, m.kind) for m in listed] == [("SmolLM2-135M-Instruct", "embedded")]
    assert reg.models() == [] and reg.model("SmolLM2-135M-Instruct").source == str(smollm2_gguf_path)
    reg.save_profile("smol-short", "SmolLM2-135M-Instruct", {"max_model_len": 512})  # stores its row
    assert reg.listed_models() == reg.models() == listed
    with pytest.raises(RegistryError, match="cannot be removed"):
        reg.remove_model("SmolLM2-135M-Instruct")
    other = open_registry(tmp_path / "other")
    other.add_model(_entry("smol", str(smollm2_gguf_path)))
    assert [m.name for m in other.listed_models()] == ["smol"]


def test_profile_names_are_checked(tmp_path: Path):
    reg = open_registry(tmp_path)
    reg.add_model(_entry("org/name:Q4_K_M"))
    reg.save_profile("org/name:Q4_K_M-default", "org/name:Q4_K_M", {})  # what default_profile makes
    for bad in ("", " x", "../../x", "a/../b", "-x", "a b", "a\nb"):
        with pytest.raises(RegistryError, match="profile name"):
            reg.save_profile(bad, "org/name:Q4_K_M", {})


def test_model_and_profile_crud(tmp_path: Path):
    reg = open_registry(tmp_path)
    assert reg.version == SCHEMA_VERSION and reg.models() == []
    reg.add_model(_entry("a"))
    with pytest.raises(RegistryError, match="already registered"):
        reg.add_model(_entry("a"))
    assert [m.name for m in reg.models()] == ["a"]
    reg.save_profile("short", "a", {"max_model_len": 1024})
    with pytest.raises(RegistryError, match="no model named 'b'"):
        reg.save_profile("p", "b", {})
    assert reg.profile("short").flags == {"max_model_len": 1024}
    reg.remove_model("a")  # its profiles go with it
    assert reg.profiles() == [] and reg.find_model("a") is None
    with pytest.raises(RegistryError, match="no profile named 'short'"):
        reg.profile("short")


def test_migration_keeps_rows_of_an_older_schema(tmp_path: Path):
    path = tmp_path / "registry.sqlite3"
    old = Registry(path)
    old.migrate(target=1)  # a registry written before profiles existed
    old.add_model(_entry("kept"))
    old.close()
    reg = open_registry(tmp_path)
    assert reg.version == SCHEMA_VERSION == len(MIGRATIONS)
    assert reg.model("kept").quantization == "Q4_1"
    reg.save_profile("p", "kept", {})
    reg.close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.raises(RegistryError, match="newer than this kvspill"):
        open_registry(tmp_path)


def test_sources_and_scan(tmp_path: Path, smollm2_gguf_path: Path, tiny_llama_dir: Path):
    gguf = inspect_source(str(smollm2_gguf_path))
    assert (gguf.kind, gguf.format, gguf.quantization) == ("gguf", "gguf", "Q4_1")
    assert gguf.size_bytes == smollm2_gguf_path.stat().st_size
    hf = inspect_source(str(tiny_llama_dir), name="tiny")
    assert (hf.name, hf.kind, hf.format) == ("tiny", "hf_dir", "safetensors") and hf.size_bytes
    with pytest.raises(RegistryError, match="not a .gguf file"):
        inspect_source(str(tmp_path / "nothing"))
    root = tmp_path / "models"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "x.gguf").symlink_to(smollm2_gguf_path)
    (root / "broken.gguf").write_bytes(b"not a gguf")
    (root / "llama").symlink_to(tiny_llama_dir, target_is_directory=True)
    result = scan_directory(root)
    assert sorted(e.kind for e in result.found) == ["gguf", "hf_dir"]
    assert len(result.skipped) == 1 and "broken.gguf" in result.skipped[0]


def test_hf_cache_scan(tmp_path: Path, tiny_llama_dir: Path):
    snapshot = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (tmp_path / "hub" / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--tiny" / "refs" / "main").write_text("abc123")
    for f in tiny_llama_dir.iterdir():
        (snapshot / f.name).write_bytes(f.read_bytes())
    entry = inspect_source("org/tiny", hf_cache_dir=tmp_path / "hub")
    assert (entry.name, entry.kind, entry.source) == ("org/tiny", "hf_cache", "org/tiny")
    out = CliRunner().invoke(
        models_app,
        ["scan", "--hf-cache-dir", str(tmp_path / "hub"), "--data-dir", str(tmp_path / "data")],
    )
    assert out.exit_code == 0, out.output
    assert "added org/tiny" in out.output


def test_profile_flags_are_the_engine_flags():
    flags = validate_flags(
        {"max_model_len": "2048", "vram_budget": "16GiB", "enforce_eager": "yes", "dtype": ""}
    )
    assert flags == {"max_model_len": "2048", "vram_budget": "16GiB", "enforce_eager": True}
    assert serve_args(flags) == ["--enforce-eager", "--max-model-len", "2048", "--vram-budget", "16GiB"]
    with pytest.raises(RegistryError, match="--block-size must be"):
        validate_flags({"block_size": 7})
    with pytest.raises(RegistryError, match="not engine flags: kv_dtype"):
        validate_flags({"kv_dtype": "fp8"})
    with pytest.raises(RegistryError, match="--max-model-len: cannot read .lots. as a token count"):
        validate_flags({"max_model_len": "lots"})
    with pytest.raises(RegistryError, match="has no unit"):
        validate_flags({"vram_budget": "16"})


def test_command_line_flags_win_over_the_profile(tmp_path: Path):
    reg = open_registry(tmp_path)
    reg.add_model(_entry("m", "/models/m.gguf"))
    reg.save_profile("p", "m", {"max_model_len": 1024, "device": "cpu"})
    source, options, _ = apply_profile(reg, "p", None, EngineOptions(max_model_len=512))
    assert source == "/models/m.gguf"
    assert (options.max_model_len, options.device) == (512, "cpu")


def test_models_cli(tmp_path: Path, smollm2_gguf_path: Path):
    run = CliRunner().invoke
    data = ["--data-dir", str(tmp_path)]
    out = run(models_app, ["add", str(smollm2_gguf_path), "--name", "smol", *data])
    assert out.exit_code == 0 and "Q4_1" in out.output
    out = run(models_app, ["profile", "fast", "-m", "smol", "--set", "max_model_len=512", *data])
    assert out.exit_code == 0 and "--max-model-len 512" in out.output
    out = run(models_app, ["profile", "bad", "-m", "smol", "--set", "block_size=7", *data])
    assert out.exit_code == 2 and "--block-size" in out.output
    listing = json.loads(run(models_app, ["ls", "--json", *data]).output)
    assert [m["name"] for m in listing["models"]] == ["smol"]
    assert listing["profiles"][0]["flags"] == {"max_model_len": "512"}
    assert "fast" in run(models_app, ["show", "smol", *data]).output
    out = run(models_app, ["rm", "nope", *data])
    assert out.exit_code == 2 and "no model named 'nope'" in out.output
    assert run(models_app, ["rm", "smol", *data]).exit_code == 0
    remaining = json.loads(run(models_app, ["ls", "--json", *data]).output)["models"]
    assert [m["kind"] for m in remaining] == ["embedded"]  # the embedded model is always listed
