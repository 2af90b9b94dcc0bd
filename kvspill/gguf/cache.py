"""A per-file cache of what is derived from a GGUF file: its HF config, fast tokenizer and
dequantized weights.

transformers rebuilds both from the GGUF metadata on every load: for the embedded SmolLM2 that is
~590K metadata values turned into Python objects and a 49K-token BPE tokenizer converted, 4-9 s
of a start on a 2-core CPU. The first load saves them with `save_pretrained`; later loads read
the saved files (config.json, tokenizer.json: ~0.3 s).

Layout: <KVSPILL_GGUF_CACHE, default ~/.cache/kvspill/gguf>/<file>/<version>/{config,tokenizer}/,
<file> from the file's real path, <version> from its size, mtime, the transformers version and
this cache's format. Each part also holds `source.json` (what it was made from).

`kvspill models prepare` also writes weights-<dtype>/model.safetensors there: every tensor as
`model/gguf_weights.iter_dequantized` yields it (Q/K rows un-permuted), cast to the CPU engine's
dtype. Dequantizing with gguf-py's numpy code is ~1.4 s of a 2-core CPU start; a load maps the
file instead (`open_dequantized`). Its safetensors metadata is its source.json, plus the kvspill
version (the tensors are kvspill's conversion) and the dtype; one that does not match is removed.

Invariants:
- A part is written in a temporary directory and renamed into place, so a part directory is
  complete or absent; two processes racing keep the first rename.
- A changed file (size or mtime) or another transformers version is a new <version>; writing one
  removes the file's other versions. A part that fails to load or whose source.json does not
  match is logged, removed and rebuilt: a cache entry never makes a load fail.
- A cache that cannot be written (read-only home) is logged once per load; the load goes on.
- What a cached load returns equals a fresh load (tests/model/test_gguf_cache.py): same config
  dict and the same tokenizer (class, vocabulary, special tokens, chat template, encodings).
- A cached load imports neither the family's config class nor the auto classes (`_load_config`,
  `_load_tokenizer`): on transformers 5 `LlamaConfig` pulls in torch.distributed.tensor and sympy
  (1.2-2 s of a 2-core CPU start), the auto classes 0.6 s more (tests/model/test_startup_light.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import struct
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import transformers
from transformers import PretrainedConfig, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from kvspill.env import env_settings
from kvspill.gguf.merge_rebuild import linear_merge_rebuild
from kvspill.gguf.reader import shared_readers

if TYPE_CHECKING:
    from torch import Tensor

logger = logging.getLogger(__name__)

CACHE_FORMAT = 3  # bump when what is saved changes (2: the file's RoPE scaling; 3: named chat templates)
WEIGHTS_FORMAT = 1  # bump when the saved weights' layout or conversion changes
_SAFETENSORS_DTYPES = {"float16": "F16", "bfloat16": "BF16", "float32": "F32"}
_T = TypeVar("_T")
# Families whose saved config.json reads back into a plain PretrainedConfig with every attribute
# the family's class gives (none has an attribute_map or derived field missing from the file).
LIGHT_CONFIG_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
# tokenizer_config.json classes that are exactly PreTrainedTokenizerFast (transformers 5 / 4.x).
_FAST_TOKENIZER_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")


def gguf_hf_config(path: Path) -> PretrainedConfig:
    """The transformers config of the GGUF file `path` (cached; transformers' errors pass through)."""

    def build() -> PretrainedConfig:
        # Not `from transformers import AutoConfig`: on transformers 5.17 the package's auto classes
        # pull in its modeling stack (bench/results/2026-12-02-h200-fit-by-default/).
        from transformers.models.auto.configuration_auto import AutoConfig

        with shared_readers():  # transformers reads the file with our fast reader
            config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
            _add_rope_scaling(config, path)
        return config

    config = _cached(path, "config", build, load_saved_config)
    config.name_or_path = str(path.parent)  # what a fresh load sets, not the cache directory
    return config


def _add_rope_scaling(config: PretrainedConfig, path: Path) -> None:
    """The file's RoPE scaling, which transformers' conversion leaves out (gguf/rope.py)."""
    from kvspill.gguf.reader import read_gguf
    from kvspill.gguf.rope import apply_gguf_rope, gguf_rope_parameters

    reader = read_gguf(path)
    field = reader.get_field("general.architecture")
    arch = str(field.contents()) if field is not None else ""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    old = dict(getattr(config, "rope_parameters", None) or {})
    theta = float(old.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
    params = gguf_rope_parameters(reader, arch, head_dim, theta)
    if params is not None:
        apply_gguf_rope(config, params)


def gguf_tokenizer(path: Path) -> PreTrainedTokenizerBase:
    """The fast tokenizer of the GGUF file `path` (cached; transformers' errors pass through)."""

    def build() -> PreTrainedTokenizerBase:
        from transformers.models.auto.tokenization_auto import AutoTokenizer  # heavy: see gguf_hf_config

        with shared_readers(), linear_merge_rebuild():
            tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        _add_named_chat_templates(tokenizer, path)
        return tokenizer

    tokenizer = _cached(path, "tokenizer", build, load_saved_tokenizer)
    tokenizer.name_or_path = str(path.parent)
    return tokenizer


def _add_named_chat_templates(tokenizer: PreTrainedTokenizerBase, path: Path) -> None:
    """The file's named chat templates (`tokenizer.chat_template.<name>`, listed in
    `tokenizer.chat_templates`: llama.cpp's converter writes a model's `tool_use` one there), which
    transformers' conversion leaves out: with them the tokenizer's template is the dict of named
    ones transformers gives for a model directory's (text/chat_templates.py picks among them)."""
    from kvspill.gguf.reader import read_gguf

    reader = read_gguf(path)
    names = reader.get_field("tokenizer.chat_templates")
    if names is None:
        return
    named = {}
    for name in names.contents():
        field = reader.get_field(f"tokenizer.chat_template.{name}")
        if field is not None:
            named[str(name)] = str(field.contents())
    if not named:
        return
    if isinstance(tokenizer.chat_template, str):
        named["default"] = tokenizer.chat_template
    tokenizer.chat_template = named


@functools.cache
def light_config_class(model_type: str) -> type[PretrainedConfig]:
    """A PretrainedConfig reporting `model_type` (to_dict, the planner's ModelSpec read it from the class)."""
    return type(f"CachedConfig_{model_type}", (PretrainedConfig,), {"model_type": model_type})


def load_saved_config(directory: Path) -> PretrainedConfig:
    """The config a `save_pretrained` wrote in `directory`, as AutoConfig reads it. A family in
    LIGHT_CONFIG_TYPES loads into a plain PretrainedConfig: the file holds every field that differs
    from PretrainedConfig's defaults (save_pretrained's diff), so the attributes are the same."""
    saved = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    model_type = saved.get("model_type")
    if model_type not in LIGHT_CONFIG_TYPES:
        from transformers.models.auto.configuration_auto import AutoConfig  # heavy: see gguf_hf_config

        return AutoConfig.from_pretrained(str(directory))
    config = light_config_class(model_type).from_dict(saved)
    for key, value in saved.items():  # keys PretrainedConfig drops (use_cache) but the family keeps
        if key not in ("model_type", "transformers_version") and not hasattr(config, key):
            setattr(config, key, value)
    config.name_or_path = str(directory)
    return config


def load_saved_tokenizer(directory: Path) -> PreTrainedTokenizerBase:
    """The tokenizer a `save_pretrained` wrote in `directory`, as AutoTokenizer loads it; without the
    auto classes when tokenizer_config.json names the fast tokenizer class itself."""
    try:
        saved = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        saved = {}
    if saved.get("tokenizer_class") in _FAST_TOKENIZER_CLASSES and (directory / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(str(directory))
    from transformers.models.auto.tokenization_auto import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))


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


def dequantized_weights_file(path: Path, dtype: str) -> Path | None:
    """Where `models prepare` saves the weights of `path` dequantized to `dtype` ("float16", ...)."""
    entry = cache_entry(path)
    return None if entry is None else entry / f"weights-{dtype}" / "model.safetensors"


@functools.cache
def kvspill_version() -> str:
    """The installed kvspill's version (not `kvspill.__version__`: the package's lazy `LLM` makes
    importing it look, to the import contracts, like importing the engine)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kvspill")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


def _weights_metadata(path: Path, dtype: str) -> dict[str, str]:
    made_from = {**_source(path), "kvspill": kvspill_version(), "dtype": dtype, "weights": WEIGHTS_FORMAT}
    return {"source": json.dumps(made_from, sort_keys=True)}  # safetensors metadata is str -> str


def open_dequantized(path: Path, dtype: str) -> Iterator[tuple[str, Tensor]] | None:
    """(HF name, CPU tensor in `dtype`) from the saved weights of `path`; None when there are none
    valid (the caller dequantizes the file). A stale or unreadable file is logged and removed."""
    target = dequantized_weights_file(path, dtype)
    if target is None or not target.is_file():
        return None
    from safetensors import safe_open

    try:
        handle = safe_open(str(target), framework="pt", device="cpu")
        if handle.metadata() != _weights_metadata(path, dtype):
            raise ValueError(f"made from {handle.metadata()}")
    except Exception as e:  # any failure of a cache entry means: dequantize the file instead
        logger.warning("GGUF cache: ignoring the weights %s (%s); dequantizing the file", target, e)
        shutil.rmtree(target.parent, ignore_errors=True)
        return None
    return ((name, handle.get_tensor(name)) for name in handle.keys())


def save_dequantized(path: Path, dtype: str, tensors: Iterable[tuple[str, Tensor]]) -> Path | None:
    """Save `tensors` (already in `dtype`) as the dequantized weights of `path`, atomically, one
    tensor in memory at a time. Returns the file, or None when the cache is off or unwritable."""
    target = dequantized_weights_file(path, dtype)
    if target is None:
        return None
    tmp = target.parent.with_name(f".{target.parent.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    try:
        tmp.mkdir(parents=True)
        _write_safetensors(tmp / target.name, tensors, _weights_metadata(path, dtype))
        shutil.rmtree(target.parent, ignore_errors=True)  # a stale file of an older kvspill
        os.rename(tmp, target.parent)
    except OSError as e:
        if not target.is_file():
            logger.warning("GGUF cache: cannot write %s (%s); starts dequantize the file", target, e)
            return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _write_safetensors(file: Path, tensors: Iterable[tuple[str, Tensor]], metadata: dict[str, str]) -> None:
    """The safetensors format (8-byte header length, JSON header, raw data) written as the tensors
    come: the data goes to a side file first, since the header (offsets) precedes it."""
    import torch  # only when weights are written: the config and tokenizer need no torch

    header: dict[str, Any] = {"__metadata__": metadata}
    data, offset = file.with_suffix(".data"), 0
    with open(data, "wb") as out:
        for name, tensor in tensors:
            dtype = str(tensor.dtype).removeprefix("torch.")
            raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
            out.write(raw.tobytes())  # one tensor at a time: a copy of one tensor at most
            header[name] = {
                "dtype": _SAFETENSORS_DTYPES[dtype], "shape": list(tensor.shape),
                "data_offsets": [offset, offset + raw.nbytes],
            }  # fmt: skip
            offset += raw.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    with open(file, "wb") as out, open(data, "rb") as src:
        out.write(struct.pack("<Q", len(blob)) + blob)
        shutil.copyfileobj(src, out, 16 << 20)
    data.unlink()
