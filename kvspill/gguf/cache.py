"""A per-file cache of what transformers derives from a GGUF file: its HF config and fast tokenizer.

transformers rebuilds both from the GGUF metadata on every load: for the embedded SmolLM2 that is
~590K metadata values turned into Python objects and a 49K-token BPE tokenizer converted, 4-9 s
of a start on a 2-core CPU. The first load saves them with `save_pretrained`; later loads read
the saved files (config.json, tokenizer.json: ~0.3 s).

Layout: <KVSPILL_GGUF_CACHE, default ~/.cache/kvspill/gguf>/<file>/<version>/{config,tokenizer}/,
<file> from the file's real path, <version> from its size, mtime, the transformers version and
this cache's format. Each part also holds `source.json` (what it was made from).

Invariants:
- A part is written in a temporary directory and renamed into place, so a part directory is
  complete or absent; two processes racing keep the first rename.
- A changed file (size or mtime) or another transformers version is a new <version>; writing one
  removes the file's other versions. A part that fails to load or whose source.json does not
  match is logged, removed and rebuilt: a cache entry never makes a load fail.
- A cache that cannot be written (read-only home) is logged once per load; the load goes on.
- What a cached load returns equals a fresh load (tests/model/test_gguf_cache.py): same config
  dict and the same tokenizer (class, vocabulary, special tokens, chat template, encodings).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import transformers
from transformers import PretrainedConfig, PreTrainedTokenizerBase

# Not `from transformers import AutoConfig`: on transformers 5.17 the package's auto classes pull
# in its modeling stack (generation, scikit-learn, torch._dynamo, torch.distributed: 7.5 s of a
# 15 s import on the H200 host, bench/results/2026-12-02-h200-fit-by-default/).
from transformers.models.auto.configuration_auto import AutoConfig

from kvspill.env import env_settings
from kvspill.gguf.reader import shared_readers

logger = logging.getLogger(__name__)

CACHE_FORMAT = 1  # bump when what is saved changes
_T = TypeVar("_T")


def gguf_hf_config(path: Path) -> PretrainedConfig:
    """The transformers config of the GGUF file `path` (cached; transformers' errors pass through)."""

    def build() -> PretrainedConfig:
        with shared_readers():  # transformers reads the file with our fast reader
            return AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)

    config = _cached(path, "config", build, lambda d: AutoConfig.from_pretrained(str(d)))
    config.name_or_path = str(path.parent)  # what a fresh load sets, not the cache directory
    return config


def gguf_tokenizer(path: Path) -> PreTrainedTokenizerBase:
    """The fast tokenizer of the GGUF file `path` (cached; transformers' errors pass through)."""

    from transformers.models.auto.tokenization_auto import AutoTokenizer  # heavy: see the imports

    def build() -> PreTrainedTokenizerBase:
        with shared_readers():
            return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)

    tokenizer = _cached(path, "tokenizer", build, lambda d: AutoTokenizer.from_pretrained(str(d)))
    tokenizer.name_or_path = str(path.parent)
    return tokenizer


def cache_entry(path: Path) -> Path | None:
    """The cache directory of this version of `path` (None when the cache is off)."""
    root = env_settings().gguf_cache_dir
    if root is None:
        return None
    return root / _file_key(path) / _version_key(_source(path))


def _source(path: Path) -> dict[str, Any]:
    st = os.stat(path)
    return {
        "path": os.path.realpath(path),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "transformers": transformers.__version__,
        "format": CACHE_FORMAT,
    }


def _file_key(path: Path) -> str:
    real = os.path.realpath(path)
    return f"{Path(real).stem[:40]}-{hashlib.sha256(real.encode()).hexdigest()[:16]}"


def _version_key(source: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest()[:16]


def _cached(path: Path, part: str, build: Callable[[], _T], load: Callable[[Path], _T]) -> _T:
    entry = cache_entry(path)
    if entry is None:
        return build()
    source = _source(path)
    target = entry / part
    if target.is_dir():
        try:
            saved = json.loads((target / "source.json").read_text(encoding="utf-8"))
            if saved != source:
                raise ValueError(f"made from {saved}, not {source}")
            return load(target)
        except Exception as e:  # any failure of a cache entry means: rebuild it
            logger.warning("GGUF cache: ignoring the %s entry %s (%s); rebuilding it", part, target, e)
            shutil.rmtree(target, ignore_errors=True)
    value = build()
    _save(value, entry, part, source)
    return value


def _save(value: Any, entry: Path, part: str, source: dict[str, Any]) -> None:
    """Write `value` (save_pretrained) as entry/part atomically; drop the file's other versions."""
    tmp = entry / f".{part}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    try:
        for stale in entry.parent.glob("*") if entry.parent.is_dir() else ():
            if stale.name != entry.name:
                shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir(parents=True)
        value.save_pretrained(str(tmp))
        (tmp / "source.json").write_text(json.dumps(source, sort_keys=True), encoding="utf-8")
        os.rename(tmp, entry / part)  # atomic; fails if another process renamed its copy first
    except OSError as e:
        if not (entry / part).is_dir():
            logger.warning("GGUF cache: cannot write %s (%s); the next start converts the file again", tmp, e)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
