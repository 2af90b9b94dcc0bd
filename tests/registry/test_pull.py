"""`kvspill pull`'s core against a local Hub: file selection, a fresh pull, a GGUF tag, an interrupted
transfer that resumes, the registry row, and `ensure_local_model`'s paths (offline too)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from huggingface_hub import constants
from registry.hub_server import COMMIT, Hub
from tiny_gguf import write_tiny_gguf

from kvspill.errors import ModelNotFoundError
from kvspill.model.resolve import resolve_model
from kvspill.registry import open_registry
from kvspill.registry.hub_files import HubRef, parse_ref, select_files
from kvspill.registry.pull import ensure_local_model, pull_model, quantization_of
from kvspill.registry.store import RegistryError


def test_parse_ref():
    assert parse_ref("org/name") == HubRef("org/name")
    assert parse_ref("org/name:q4_k_m") == HubRef("org/name", tag="Q4_K_M")
    assert parse_ref("org/name/sub/x.gguf") == HubRef("org/name", filename="sub/x.gguf")
    assert parse_ref("org/name:Q8_0").name() == "org/name:Q8_0"
    assert HubRef("org/name").name("Q4_K_M") == "org/name:Q4_K_M"
    for not_hub in ("./org/name", "name", "org/name:", "org/na me", "/abs/path/x.gguf"):
        assert parse_ref(not_hub) is None, not_hub


def test_select_files():
    safetensors = ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                   "model.safetensors.index.json", "tokenizer.json", "pytorch_model.bin", "original/x.safetensors",
                   "README.md", "chat_template.jinja", "model.gguf"]  # fmt: skip
    picked = select_files(HubRef("o/n"), safetensors)
    assert picked.format == "safetensors" and picked.model_file is None
    assert picked.files == ("chat_template.jinja", "config.json", "model-00001-of-00002.safetensors",
                            "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json")  # fmt: skip
    ggufs = ["m-Q4_K_M.gguf", "m-Q4_K_S.gguf", "m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00002-of-00002.gguf",
             "mmproj-m-Q4_K_M.gguf"]  # fmt: skip
    assert select_files(HubRef("o/n"), ggufs).files == ("m-Q4_K_M.gguf",)  # the default tag, not mmproj
    split = select_files(HubRef("o/n", tag="Q8_0"), ggufs)
    assert split.files == ("m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00002-of-00002.gguf")
    assert split.model_file == "m-Q8_0-00001-of-00002.gguf" and split.tag == "Q8_0"
    explicit = select_files(HubRef("o/n", filename="m-Q8_0-00002-of-00002.gguf"), ggufs)
    assert explicit.files == split.files  # a part pulls all the parts
    with pytest.raises(RegistryError, match="several files.*m-Q4_K_M.gguf, m-Q4_K_S.gguf"):
        select_files(HubRef("o/n", tag="Q4_K"), ggufs)
    with pytest.raises(RegistryError, match="no .gguf file of o/n holds 'IQ2_XS'.*m-Q4_K_M.gguf"):
        select_files(HubRef("o/n", tag="IQ2_XS"), ggufs)
    with pytest.raises(RegistryError, match=r"holds 'Q4_K_M' \(the default tag\).*o/n:TAG"):
        select_files(HubRef("o/n"), ["m-Q8_0.gguf", "m-F16.gguf"])
    with pytest.raises(
        RegistryError, match=r"neither config.json with \*.safetensors nor .gguf.*pytorch_model.bin"
    ):
        select_files(HubRef("o/n"), ["config.json", "pytorch_model.bin"])
    with pytest.raises(RegistryError, match="misses parts.*m-00002-of-00002.gguf"):
        select_files(HubRef("o/n", filename="m-00001-of-00002.gguf"), ["m-00001-of-00002.gguf"])


def _pull(hub: Hub, model: str, **kwargs: str):
    return pull_model(model, open_registry(hub.data), cache_dir=hub.cache, endpoint=hub.url, **kwargs)


def test_fresh_safetensors_pull_registers_and_is_idempotent(hub: Hub, tiny_llama_dir: Path):
    pulled = _pull(hub, "org/tiny")
    entry = open_registry(hub.data).model("org/tiny")
    assert entry == pulled.entry
    assert (entry.kind, entry.format, entry.quantization) == ("pulled", "safetensors", "float32")
    assert entry.size_bytes == sum(p.stat().st_size for p in tiny_llama_dir.iterdir())
    assert Path(entry.source) == pulled.snapshot and pulled.snapshot.parent.name == "snapshots"
    assert sorted(p.name for p in pulled.snapshot.iterdir()) == sorted(
        p.name for p in tiny_llama_dir.iterdir()
    )
    assert hub.state.fetched() == {p.name for p in tiny_llama_dir.iterdir()}  # no .bin, .onnx, original/
    assert resolve_model(entry.source).kind == "dir"
    gets = len(hub.state.gets_of("model.safetensors"))
    _pull(hub, "org/tiny")  # again: the same one row, nothing downloaded twice
    assert [m.name for m in open_registry(hub.data).models()] == ["org/tiny"]
    assert len(hub.state.gets_of("model.safetensors")) == gets == 1


def test_gguf_tag_pull(hub: Hub):
    pulled = _pull(hub, "org/tiny-GGUF:q8_0")
    entry = pulled.entry
    assert entry.name == "org/tiny-GGUF:Q8_0" and entry.source.endswith("tiny-Q8_0.gguf")
    assert (entry.kind, entry.format, entry.quantization) == ("pulled", "gguf", "Q8_0")
    assert entry.size_bytes == hub.state.repos["org/tiny-GGUF"]["tiny-Q8_0.gguf"].stat().st_size
    assert resolve_model(entry.source).kind == "gguf"
    default = _pull(hub, "org/tiny-GGUF").entry  # no tag on a GGUF repo: Q4_K_M, not the mmproj file
    assert default.name == "org/tiny-GGUF:Q4_K_M" and default.source.endswith("/tiny-Q4_K_M.gguf")
    assert hub.state.fetched() == {"tiny-Q8_0.gguf", "tiny-Q4_K_M.gguf"}  # no mmproj, no README
    with pytest.raises(RegistryError, match="no .gguf file of org/tiny-GGUF holds 'Q6_K'.*tiny-Q8_0.gguf"):
        _pull(hub, "org/tiny-GGUF:Q6_K")


def test_gguf_quantization_trusts_the_header_over_the_tag():
    assert quantization_of("Q4_K", "Q4_K_M") == "Q4_K_M"  # what the header says, more precisely
    assert quantization_of(None, "F16") == "F16"  # a float file: no quantized type in the header
    assert quantization_of("Q4_1", "Q4_K_M") == "Q4_1"  # a file named for what it is not
    assert quantization_of("Q8_0", None) == "Q8_0"


def test_interrupted_download_resumes_with_a_range_request(hub: Hub, smollm2_gguf_path: Path):
    """The embedded model's GGUF served as a Q4_K_M file; the first transfer drops at 25 MiB.
    huggingface_hub writes in 10 MiB chunks, so it asks again from the last whole chunk it kept."""
    hub.state.repos["org/smol-GGUF"] = {"SmolLM2-135M-Instruct-Q4_K_M.gguf": smollm2_gguf_path}
    cut = 25 * 2**20
    hub.state.drop_after["SmolLM2-135M-Instruct-Q4_K_M.gguf"] = cut
    entry = _pull(hub, "org/smol-GGUF").entry
    first, second = hub.state.gets_of("SmolLM2-135M-Instruct-Q4_K_M.gguf")
    assert first.range is None and second.range is not None
    resumed_at = int(second.range.removeprefix("bytes=").removesuffix("-"))
    assert 0 < resumed_at <= cut
    digest = hashlib.sha256(Path(entry.source).read_bytes()).hexdigest()
    assert digest == hashlib.sha256(smollm2_gguf_path.read_bytes()).hexdigest()
    # its header says Q4_1, whatever the file name says
    assert (entry.name, entry.quantization) == ("org/smol-GGUF:Q4_K_M", "Q4_1")


def test_hub_errors_are_one_line(hub: Hub):
    with pytest.raises(RegistryError, match=r"no model org/nope on http://127.0.0.1:\d+ .*check the id"):
        _pull(hub, "org/nope")
    with pytest.raises(RegistryError, match="has no such revision: check --revision"):
        _pull(hub, "org/tiny", revision="v9")
    with pytest.raises(RegistryError, match="is not a Hugging Face model: write org/name"):
        _pull(hub, "not a repo")
    with pytest.raises(RegistryError, match="not a model kvspill runs.*embedding model.*BertModel"):
        _pull(hub, "org/embed")
    assert open_registry(hub.data).models() == []


def _ensure(hub: Hub, model: str | None, offline: bool = False) -> str | None:
    return ensure_local_model(
        model, offline=offline, data_dir=hub.data, cache_dir=hub.cache, endpoint=hub.url
    )


def test_ensure_local_model_leaves_local_models_alone(hub: Hub, tmp_path: Path, smollm2_gguf_path: Path):
    assert _ensure(hub, None) is None
    assert _ensure(hub, "random:llama-1b") == "random:llama-1b"
    assert _ensure(hub, str(tmp_path)) == str(tmp_path)
    assert _ensure(hub, "SmolLM2-135M-Instruct") is None  # the embedded model by its name
    registry = open_registry(hub.data)
    registry.add_model(registry_entry := _local_entry(smollm2_gguf_path))
    assert _ensure(hub, registry_entry.name) == registry_entry.source
    assert _ensure(hub, "no-such-thing") == "no-such-thing"  # resolve_model says what is wrong
    assert hub.state.requests == []


def _local_entry(path: Path):
    from kvspill.registry.sources import inspect_source

    return inspect_source(str(path), name="mine")


def test_ensure_local_model_pulls_once(hub: Hub):
    source = _ensure(hub, "org/tiny")
    assert source is not None and resolve_model(source).kind == "dir"
    assert open_registry(hub.data).model("org/tiny").source == source
    seen = len(hub.state.requests)
    assert _ensure(hub, "org/tiny", offline=True) == source  # registered: no network needed
    gguf = _ensure(hub, "org/tiny-GGUF:Q8_0")
    assert gguf is not None and gguf.endswith("tiny-Q8_0.gguf")
    seen = len(hub.state.requests)
    assert _ensure(hub, "org/tiny-GGUF", offline=True) == gguf  # the one tag pulled of that repo
    assert len(hub.state.requests) == seen
    for p in Path(gguf).parent.iterdir():  # the cache emptied by hand: pulled again
        p.unlink()
    assert _ensure(hub, "org/tiny-GGUF:Q8_0") == gguf and Path(gguf).is_file()


def test_ensure_local_model_finds_the_hf_cache_without_the_registry(hub: Hub, tmp_path: Path):
    _ensure(hub, "org/tiny")
    seen = len(hub.state.requests)
    fresh = ensure_local_model(
        "org/tiny", offline=True, data_dir=tmp_path / "other", cache_dir=hub.cache, endpoint=hub.url
    )
    assert fresh == "org/tiny" and len(hub.state.requests) == seen
    # resolve_model finds it by id, though the cache's file list names the .bin files not pulled
    assert resolve_model("org/tiny", hf_cache_dir=hub.cache).kind == "dir"


def test_a_cached_gguf_only_repo_without_refs_is_found_offline(hub: Hub, tmp_path: Path):
    """A snapshot `hf download` left (one GGUF, no config.json, no refs/main) is what resolve_model
    loads, so the CLI takes it too, offline or not, without a request to the hub."""
    cache = tmp_path / "hf-cache"
    snapshot = cache / "models--org--only-gguf" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    write_tiny_gguf(snapshot / "only.Q8_0.gguf")
    for offline in (True, False):
        found = ensure_local_model(
            "org/only-gguf", offline=offline, data_dir=tmp_path / "d", cache_dir=cache, endpoint=hub.url
        )
        assert found == "org/only-gguf"
    assert hub.state.requests == []


def test_offline_refuses_to_download(hub: Hub, monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(
        ModelNotFoundError, match=r"--offline forbids.*`kvspill pull org/tiny`.*drop --offline"
    ):
        _ensure(hub, "org/tiny", offline=True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(
        ModelNotFoundError, match="HF_HUB_OFFLINE=1 forbids.*`kvspill pull org/tiny-GGUF:Q8_0`"
    ):
        _ensure(hub, "org/tiny-GGUF:Q8_0")
    assert hub.state.requests == []


def test_revision_and_download_dir_give_that_snapshot(hub: Hub, tmp_path: Path, caplog):
    """vLLM's --revision / --download-dir: the snapshot's path, pulled once into that folder, not
    registered (the registry names one revision a model), then found there offline."""
    folder = tmp_path / "models"

    def ensure(model: str, **kw) -> str | None:
        return ensure_local_model(model, data_dir=hub.data, endpoint=hub.url, **kw)

    with pytest.raises(
        ModelNotFoundError, match=r"org/tiny at revision 0123.* is not on this machine in .*models"
    ):
        ensure("org/tiny", offline=True, revision=COMMIT, download_dir=folder)
    source = ensure("org/tiny", offline=False, download_dir=folder)  # main, into that folder
    assert source is not None and Path(source).is_relative_to(folder) and resolve_model(source).kind == "dir"
    assert Path(source).name == COMMIT and open_registry(hub.data).find_model("org/tiny") is None
    seen = len(hub.state.requests)
    assert ensure("org/tiny", offline=True, download_dir=folder) == source
    assert ensure("org/tiny", offline=True, revision=COMMIT, download_dir=folder) == source
    assert ensure("org/tiny", offline=True, revision="main", download_dir=folder) == source
    assert len(hub.state.requests) == seen
    with pytest.raises(ModelNotFoundError, match="at revision v2 is not on this machine"):
        ensure("org/tiny", offline=True, revision="v2", download_dir=folder)
    assert _ensure(hub, "org/tiny") != source  # without the flags: the registry's own pull, elsewhere
    assert ensure(str(tmp_path), offline=True, revision=COMMIT) == str(tmp_path)
    assert f"--revision {COMMIT} applies to a Hugging Face id" in caplog.text
