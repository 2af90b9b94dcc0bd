"""Get a model from the Hugging Face Hub into its local cache and the registry (`kvspill pull`),
and turn a `--model` into something `resolve_model` finds on disk (`ensure_local_model`).

Invariants:
- Every byte comes through huggingface_hub (`snapshot_download`): its cache (HF_HUB_CACHE /
  HF_HOME), its progress bars, its retries that resume a dropped transfer with a Range request,
  HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE as it reads them. `endpoint` / `cache_dir` arguments
  only override those (tests point them at a local server).
- Only the files `hub_files.select_files` picks are downloaded.
- A pulled model's registry row has kind `pulled` and, as source, its path inside the cache's
  snapshot (the snapshot dir, or the .gguf there: the link, not the blob, so the name keeps its
  suffix); pulling again replaces the row.
- No typer, no torch: the CLI (`cli/pull_cmd.py`) prints and checks the model can run.
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kvspill.errors import KvspillError, ModelNotFoundError
from kvspill.registry.hub_files import HubRef, Selection, parse_ref, select_files
from kvspill.registry.sources import inspect_source
from kvspill.registry.store import ModelEntry, Registry, RegistryError, open_registry

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PulledModel:
    ref: HubRef
    selection: Selection
    snapshot: Path  # the cache's snapshot dir of the revision pulled
    entry: ModelEntry  # the registry row (stored by `pull_model`)


def download_model(
    model: str,
    *,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    endpoint: str | None = None,
) -> PulledModel:
    """Download `model` (org/name, org/name:TAG or org/name/file.gguf) into the HF cache."""
    from huggingface_hub import snapshot_download

    ref = parse_ref(model)
    if ref is None:
        raise RegistryError(
            f"{model!r} is not a Hugging Face model: write org/name, org/name:Q4_K_M or org/name/file.gguf"
        )
    selection = select_files(ref, _repo_files(ref, revision, endpoint))
    with _hub_errors(ref, endpoint):
        snapshot = Path(
            snapshot_download(
                ref.repo_id,
                revision=revision,
                cache_dir=cache_dir,
                endpoint=endpoint,
                allow_patterns=[glob.escape(f) for f in selection.files],  # exact names, no pattern
            )
        )
    missing = [f for f in selection.files if not (snapshot / f).is_file()]
    if missing:
        raise RegistryError(f"the download of {ref.repo_id} misses {', '.join(missing)}: run the pull again")
    return PulledModel(ref, selection, snapshot, _entry(ref, selection, snapshot))


def pull_model(
    model: str,
    registry: Registry,
    *,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    endpoint: str | None = None,
) -> PulledModel:
    """`download_model`, then its row in `registry` (replacing one of the same name)."""
    pulled = download_model(model, revision=revision, cache_dir=cache_dir, endpoint=endpoint)
    registry.add_model(pulled.entry, replace=True)
    return pulled


def _repo_files(ref: HubRef, revision: str | None, endpoint: str | None) -> list[str]:
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    with _hub_errors(ref, endpoint):
        tree = HfApi(endpoint=endpoint).list_repo_tree(ref.repo_id, recursive=True, revision=revision)
        return [f.path for f in tree if isinstance(f, RepoFile)]


def _entry(ref: HubRef, selection: Selection, snapshot: Path) -> ModelEntry:
    path = snapshot / selection.model_file if selection.model_file else snapshot
    try:
        entry = inspect_source(str(path), name=ref.name(selection.tag))
    except RegistryError as e:
        raise RegistryError(
            f"{ref.repo_id} was downloaded to {path} but is not a model kvspill runs: {e}"
        ) from e
    size = sum((snapshot / f).stat().st_size for f in selection.files)
    quantization = quantization_of(entry.quantization, selection.tag) if selection.format == "gguf" else None
    return dataclasses.replace(
        entry,
        source=str(path),
        kind="pulled",
        size_bytes=size,
        quantization=quantization or entry.quantization,
    )


def quantization_of(header_type: str | None, tag: str | None) -> str | None:
    """A GGUF's quantization: the tag it was pulled by where its header agrees or says nothing
    (a Q4_K_M file's largest tensors are Q4_K; a float file has no quantized type), else the header's."""
    if tag is None or (header_type is not None and not tag.upper().startswith(header_type.upper())):
        return header_type
    return tag


@contextmanager
def _hub_errors(ref: HubRef, endpoint: str | None) -> Iterator[None]:
    """huggingface_hub's exceptions as one-line RegistryErrors saying what to change."""
    try:
        yield
    except KvspillError:
        raise
    except Exception as e:  # the hub's errors, httpx2's transport errors, OSError from the cache
        raise RegistryError(hub_error_text(ref.repo_id, e, endpoint)) from e


def hub_error_text(repo_id: str, e: Exception, endpoint: str | None) -> str:
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub import errors as hub

    where = endpoint or constants.ENDPOINT
    if isinstance(e, hub.OfflineModeIsEnabled):
        return f"cannot download {repo_id}: HF_HUB_OFFLINE is set; unset it to download"
    if isinstance(e, hub.GatedRepoError):
        return f"{repo_id} is gated: accept its terms on {where}/{repo_id}, then set HF_TOKEN (or `hf auth login`)"
    if isinstance(e, hub.RepositoryNotFoundError):
        return f"no model {repo_id} on {where} (a private one needs HF_TOKEN): check the id"
    if isinstance(e, hub.RevisionNotFoundError):
        return f"{repo_id} has no such revision: check --revision"
    if isinstance(e, (httpx2.TransportError, hub.LocalEntryNotFoundError)):
        return f"cannot reach {where} to download {repo_id} ({e}): check the network, HF_ENDPOINT or proxy"
    return f"downloading {repo_id} from {where} failed: {type(e).__name__}: {e}"


def ensure_local_model(
    model: str | None,
    *,
    offline: bool,
    data_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    endpoint: str | None = None,
    revision: str | None = None,
    download_dir: str | Path | None = None,
) -> str | None:
    """`model` as a string `resolve_model` finds on disk, pulling a hub model that is not local.

    None, `random:...` and existing paths come back unchanged; the embedded model's name gives
    None; a registry name gives its source; a hub id in the HF cache comes back unchanged; any
    other hub reference (org/name, org/name:TAG, org/name/file.gguf) is pulled and registered,
    unless `offline` or HF_HUB_OFFLINE forbids it (ModelNotFoundError naming `kvspill pull`).
    Anything else comes back unchanged for `resolve_model` to say what is wrong with it.

    `revision` or `download_dir` (vLLM's --revision, --download-dir: a cache folder in place of
    `cache_dir`): a hub reference is looked up or pulled at that revision in that folder, without
    the registry, and its snapshot's path comes back (what loads is then exactly that)."""
    from huggingface_hub import constants

    from kvspill.registry.store import embedded_entry

    if model is None or model.startswith("random:") or Path(model).expanduser().exists():
        if revision is not None:
            logger.warning(
                "--revision %s applies to a Hugging Face id; %s is not one: loaded as it is", revision, model
            )
        return model
    ref = parse_ref(model)
    if ref is not None and (revision is not None or download_dir is not None):
        folder = download_dir if download_dir is not None else cache_dir
        return _hub_snapshot(model, ref, revision, folder, offline or constants.is_offline_mode(), endpoint)
    embedded = embedded_entry()
    if embedded is not None and model == embedded.name:
        return None
    registry = _registry_or_none(data_dir)
    entry = _registered(registry, model) if registry is not None else None
    if entry is not None and (entry.kind != "pulled" or Path(entry.source).exists()):
        return entry.source
    if ref is None:
        return model
    if entry is None and ref.tag is None and ref.filename is None and _cached(ref.repo_id, cache_dir):
        return model
    if offline or constants.is_offline_mode():
        flag = "--offline" if offline else "HF_HUB_OFFLINE=1"
        raise ModelNotFoundError(
            f"{model} is not on this machine and {flag} forbids downloading it: run `kvspill pull {model}` "
            f"where the network is reachable, or drop {flag}"
        )
    logger.info("%s is not on this machine: pulling it from the Hugging Face Hub", model)
    if registry is None:
        return download_model(model, cache_dir=cache_dir, endpoint=endpoint).entry.source
    return pull_model(model, registry, cache_dir=cache_dir, endpoint=endpoint).entry.source


def _hub_snapshot(
    model: str,
    ref: HubRef,
    revision: str | None,
    cache_dir: str | Path | None,
    offline: bool,
    endpoint: str | None,
) -> str:
    """The local source of hub reference `model` at `revision` in `cache_dir`: a snapshot already
    there that loads (a bare repo id), else a download (not registered: the registry names one
    revision a model)."""
    from kvspill.model.resolve import resolve_model

    if ref.tag is None and ref.filename is None:
        snapshot = _local_snapshot(ref.repo_id, revision, cache_dir)
        if snapshot is not None:
            try:
                resolve_model(snapshot)
                return snapshot
            except ModelNotFoundError:
                pass
    if offline:
        where = f" at revision {revision}" if revision else ""
        folder = f" in {cache_dir}" if cache_dir else ""
        raise ModelNotFoundError(
            f"{model}{where} is not on this machine{folder} and offline mode forbids downloading it: "
            "drop --offline / HF_HUB_OFFLINE, or pull it where the network is reachable"
        )
    logger.info(
        "pulling %s%s from the Hugging Face Hub", model, f" at revision {revision}" if revision else ""
    )
    return download_model(model, revision=revision, cache_dir=cache_dir, endpoint=endpoint).entry.source


def _local_snapshot(repo_id: str, revision: str | None, cache_dir: str | Path | None) -> str | None:
    """The cached snapshot folder of `repo_id` at `revision` (a commit, or a branch or tag the
    cache's refs/ name; None: main), or None. The folder itself: huggingface_hub's own lookup
    calls a snapshot holding only the files a pull selected incomplete."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    repo = Path(cache_dir or constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")
    commit = revision or "main"
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        ref = repo / "refs" / commit
        commit = ref.read_text().strip() if ref.is_file() else ""
    snapshot = repo / "snapshots" / commit
    return str(snapshot) if commit and snapshot.is_dir() else None


def _registry_or_none(data_dir: str | Path | None) -> Registry | None:
    """The registry, or None (logged) when it cannot be opened: a hub id still works without it."""
    try:
        return open_registry(data_dir)
    except RegistryError as e:
        logger.warning("model registry not read: %s", e)
        return None


def _registered(registry: Registry, model: str) -> ModelEntry | None:
    """The row named `model`, else for a bare repo id the one GGUF pulled from it (`org/name:TAG`)."""
    entry = registry.find_model(model)
    if entry is not None:
        return entry
    tagged = [m for m in registry.models() if m.name.startswith(model + ":")]
    return tagged[0] if len(tagged) == 1 else None


def _cached(repo_id: str, cache_dir: str | Path | None) -> bool:
    """A snapshot of `repo_id` in the HF cache that loads as it is (a config.json, or one GGUF
    file; `main` or, without refs, the newest snapshot), as `resolve_model` finds it; no network."""
    from kvspill.model.resolve import resolve_model

    try:
        resolve_model(repo_id, hf_cache_dir=cache_dir)
    except ModelNotFoundError:
        return False
    return True
