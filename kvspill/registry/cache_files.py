"""Free the Hugging Face cache files of a model `kvspill pull` downloaded (`kvspill models rm`).

Invariants:
- Only rows of kind `pulled` have files to free; their source lies in a cache snapshot
  (`<cache>/models--org--name/snapshots/<commit>/...`), which names the repo and revision.
- When no other pulled row uses that snapshot, the whole revision goes through huggingface_hub's
  own `scan_cache_dir(...).delete_revisions(...)` (blobs other revisions share stay).
- When another pulled row uses it (two GGUF tags of one repo), only this row's files go: the
  snapshot links and each blob no other link of the repo points at.
- Returns the bytes freed; files already gone count zero, never an error.
"""

from __future__ import annotations

from pathlib import Path

from kvspill.registry.hub_files import split_parts
from kvspill.registry.store import ModelEntry, RegistryError


def free_pulled_files(entry: ModelEntry, others: list[ModelEntry]) -> int:
    """Delete `entry`'s files from the HF cache (see the module's rules); the bytes freed."""
    snapshot = _snapshot_of(Path(entry.source))
    shared = [
        o
        for o in others
        if o.name != entry.name and o.kind == "pulled" and Path(o.source).is_relative_to(snapshot)
    ]
    if shared:
        return _unlink_own_files(entry, snapshot)
    return _delete_revision(snapshot)


def _snapshot_of(path: Path) -> Path:
    for parent in (path, *path.parents):
        if parent.parent.name == "snapshots" and parent.parent.parent.name.startswith("models--"):
            return parent
    raise RegistryError(
        f"{path} is not inside a Hugging Face cache snapshot: remove the files by hand if they are not needed"
    )


def _delete_revision(snapshot: Path) -> int:
    from huggingface_hub import scan_cache_dir

    cache_dir = snapshot.parent.parent.parent
    info = scan_cache_dir(cache_dir)
    known = {r.commit_hash for repo in info.repos for r in repo.revisions}
    if snapshot.name not in known:
        return 0
    strategy = info.delete_revisions(snapshot.name)
    strategy.execute()
    return int(strategy.expected_freed_size)


def _own_files(entry: ModelEntry, snapshot: Path) -> list[Path]:
    """The snapshot files that are `entry`'s own: a GGUF's parts, else the non-GGUF files."""
    path = Path(entry.source)
    if entry.format != "gguf":
        return [p for p in snapshot.rglob("*") if not p.is_dir() and p.suffix.lower() != ".gguf"]
    split = split_parts(path.name)
    if split is None:
        return [path]
    stem = path.name[: -len("-00001-of-00001.gguf")]
    return [path.with_name(f"{stem}-{i:05d}-of-{split[1]:05d}.gguf") for i in range(1, split[1] + 1)]


def _unlink_own_files(entry: ModelEntry, snapshot: Path) -> int:
    repo_dir = snapshot.parent.parent
    freed = 0
    for link in _own_files(entry, snapshot):
        if not link.is_symlink():  # a cache without symlinks holds the file itself
            freed += link.stat().st_size if link.is_file() else 0
            link.unlink(missing_ok=True)
            continue
        blob = link.resolve()
        link.unlink()
        if blob.is_file() and not _linked(blob, repo_dir / "snapshots"):
            freed += blob.stat().st_size
            blob.unlink()
    return freed


def _linked(blob: Path, snapshots: Path) -> bool:
    return any(p.is_symlink() and p.resolve() == blob for p in snapshots.rglob("*"))
