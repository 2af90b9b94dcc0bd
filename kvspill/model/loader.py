"""Build a kvspill model from a resolved checkpoint: config, overrides, streamed weights.

Invariants:
- The model is built on the `meta` device, given storage on the target device
  (`to_empty`), then filled one tensor at a time: a safetensors tensor is read lazily
  (`safe_open`), a GGUF tensor is dequantized alone (or kept in its quantized blocks:
  model/gguf_weights.py; or read from the dequantized copy `kvspill models prepare` saved);
  each is cast and copied into its parameter before the next is read.
  No second full copy of the weights ever exists.
- Every parameter must be loaded: a missing tensor is an error, never uninitialized memory.
- `--rope-scaling` replaces the config's RoPE scaling and raises max_position_embeddings by
  its factor (unless the override sets it); the trained length is kept as
  `original_max_position_embeddings`. The returned `hf_config` is the config after overrides.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from transformers import PretrainedConfig

from kvspill.config import ROPE_TYPES
from kvspill.errors import InvalidParameterError, ModelNotFoundError, UnsupportedModelError
from kvspill.gguf.cache import gguf_hf_config
from kvspill.kernels.fp8_linear import check_fp8_supported
from kvspill.model import fp8 as fp8_weights
from kvspill.model import gguf_weights, int4_checkpoints
from kvspill.model.layers import rope_parameters
from kvspill.model.llama import LlamaForCausalLM, head_dim_of
from kvspill.model.offload import LayerOffloader, offload_layers, place_with_offload
from kvspill.model.parallel import SINGLE, TensorParallel
from kvspill.model.registry import architecture_of, get_model_class
from kvspill.model.resolve import ResolvedModel, safetensors_files

# Defaults for `--rope-scaling llama3:F`: the values Meta ships with Llama 3.1.
_LLAMA3_DEFAULTS = {"low_freq_factor": 1.0, "high_freq_factor": 4.0}


@dataclass
class LoadedModel:
    """A model ready to run. Counts are per model (not per device); head_dim in elements."""

    model: LlamaForCausalLM  # base of every family; eval mode, on device (RoPE table float32)
    hf_config: PretrainedConfig  # after --rope-scaling overrides
    architecture: str  # e.g. "LlamaForCausalLM"
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    max_model_len: int  # positions the model (and its RoPE table) supports
    dtype: torch.dtype
    offloader: LayerOffloader | None = None  # --cpu-offload-gb: layers in pinned RAM


@dataclass(frozen=True)
class _WeightSource:
    """Where the weights come from and the form they keep on the device: at most one of GGUF
    blocks (`keep_quantized` with a GGUF reader), int4 or fp8; otherwise dense in the model dtype."""

    path: Path
    reader: Any  # the open GGUF file; None for a safetensors directory
    int4: int4_checkpoints.Int4Config | None  # the directory's int4 scheme
    fp8: bool  # --quantization fp8: the decoder projections in fp8
    keep_quantized: bool  # GGUF tensors stay in their blocks (only with a reader)


def load_model(
    resolved: ResolvedModel,
    device: torch.device,
    dtype: torch.dtype,
    rope_scaling: dict[str, Any] | None = None,
    max_model_len: int | None = None,
    keep_quantized: bool = False,
    cpu_offload_bytes: int = 0,
    fp8: bool = False,
    tp: TensorParallel = SINGLE,
) -> LoadedModel:
    """Load `resolved` onto `device` in `dtype`, applying the RoPE override and max length.

    `keep_quantized` (a GGUF file): the quantized tensors stay in their blocks (gguf_weights.py).
    `tp`: this rank's shard only (model/parallel.py); every rank reads the whole file."""
    config = load_hf_config(resolved)
    arch = architecture_of(config)  # first: an architecture kvspill does not run is the error, not its RoPE
    cls = get_model_class(arch)
    if rope_scaling is not None:
        apply_rope_override(config, rope_scaling)
    max_len = _max_model_len(config, max_model_len)
    source = _weight_source(resolved, config, device, keep_quantized, fp8)
    with torch.device("meta"):
        model = cls(config, max_model_len=max_len, dtype=dtype, tp=tp)
        _install_quantized_modules(model, source, dtype)
    offloaded = place_with_offload(model, device, cpu_offload_bytes)
    model.init_buffers()
    loaded, expected = _load_weights(model, source, config, device, dtype)
    missing = expected - loaded
    if missing:
        raise ModelNotFoundError(
            f"The checkpoint at {str(resolved.path)!r} lacks {len(missing)} weights the model needs, "
            f"e.g. {sorted(missing)[:3]}. The download is incomplete or does not match config.json."
        )
    model.eval().requires_grad_(False)
    offloader = offload_layers(model, offloaded, device) if offloaded else None
    return LoadedModel(
        model=model,
        hf_config=config,
        architecture=arch,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        num_kv_heads=config.num_key_value_heads,
        head_dim=head_dim_of(config),
        hidden_size=config.hidden_size,
        vocab_size=config.vocab_size,
        max_model_len=max_len,
        dtype=dtype,
        offloader=offloader,
    )


def _weight_source(
    resolved: ResolvedModel, config: PretrainedConfig, device: torch.device, keep_quantized: bool, fp8: bool
) -> _WeightSource:
    """Checks the asked-for quantization against the checkpoint's, then opens a GGUF file."""
    int4 = int4_checkpoints.parse_int4_config(config) if resolved.kind == "dir" else None
    if int4 is not None and fp8:
        raise InvalidParameterError(
            "quantization", f"this checkpoint is already {int4.method} int4: drop --quantization fp8"
        )
    if fp8:
        check_fp8_supported(device)
    reader = gguf_weights.open_gguf(resolved.path) if resolved.kind == "gguf" else None
    return _WeightSource(resolved.path, reader, int4, fp8, keep_quantized)


def _install_quantized_modules(model: LlamaForCausalLM, source: _WeightSource, dtype: torch.dtype) -> None:
    """On `meta`, before storage exists: swap in the modules of the source's quantized form."""
    if source.keep_quantized and source.reader is not None:
        gguf_weights.install_quant_modules(model, source.reader, dtype)
    elif source.int4 is not None:
        int4_checkpoints.install_int4_modules(model, dtype, source.int4)
    elif source.fp8:
        fp8_weights.install_fp8_modules(model, dtype)


def _load_weights(
    model: LlamaForCausalLM,
    source: _WeightSource,
    config: PretrainedConfig,
    device: torch.device,
    dtype: torch.dtype,
) -> tuple[set[str], set[str]]:
    """Streams the weights into the model; returns (names loaded, names the model needs)."""
    expected = model.expected_weight_names()
    reader = source.reader
    if source.int4 is not None:
        loaded = int4_checkpoints.load_weights_int4(
            model, _iter_safetensors(source.path), source.int4, device
        )
        expected = int4_checkpoints.expected_weight_names_int4(model)
    elif source.fp8:
        tensors = (
            _iter_safetensors(source.path)
            if reader is None
            else gguf_weights.iter_dequantized(reader, config)
        )
        loaded = fp8_weights.load_weights_fp8(model, tensors)
        expected = fp8_weights.expected_weight_names_fp8(model)
    elif reader is None:
        loaded = model.load_weights(_iter_safetensors(source.path))
    elif source.keep_quantized:
        loaded = gguf_weights.load_quantized(model, reader, config, device)
        gguf_weights.check_quantized_complete(model, source.path)
    else:  # dense: the copy `models prepare` saved in this dtype, else dequantized now
        loaded = model.load_weights(gguf_weights.iter_dense(reader, source.path, config, dtype))
    return loaded, expected


def load_hf_config(resolved: ResolvedModel) -> PretrainedConfig:
    """The transformers config of a resolved model (from config.json or GGUF metadata)."""
    path = resolved.path
    try:
        if resolved.kind == "gguf":
            return gguf_hf_config(path)  # cached per file: transformers' conversion takes seconds
        # Imported here: a GGUF start never needs the auto classes (0.6 s; gguf/cache.py).
        from transformers.models.auto.configuration_auto import AutoConfig

        return AutoConfig.from_pretrained(str(path))
    except struct.error as e:  # a read past the end: resolve_model's header walk missed it
        raise ModelNotFoundError(
            f"Cannot read the config of {str(path)!r}: the file is truncated or corrupt ({e}): download it again."
        ) from e
    except (ValueError, KeyError) as e:
        # Unknown model_type / GGUF architecture: transformers cannot describe it, nor can we.
        # (A GGUF file cut short was refused by resolve_model, which walks its header.)
        from kvspill.model.registry import supported_architectures

        raise UnsupportedModelError(
            f"Cannot load the config of {str(path)!r}: {e}. kvspill supports: "
            f"{', '.join(supported_architectures())}."
        ) from e
    except OSError as e:
        raise ModelNotFoundError(f"Cannot read the config of {str(path)!r}: {e}.") from e


def apply_rope_override(config: PretrainedConfig, rope_scaling: dict[str, Any]) -> None:
    """Replace the config's RoPE scaling with `rope_scaling` (e.g. {"rope_type": "yarn", "factor": 4}).

    Raises max_position_embeddings to original * factor unless the override sets
    `max_position_embeddings`; `original_max_position_embeddings` defaults to the config's
    current max_position_embeddings. Handles transformers 5 (`rope_parameters`) and 4.x
    (`rope_scaling` + `rope_theta`) configs.
    """
    override = dict(rope_scaling)
    rope_type = override.pop("type", None) or override.get("rope_type", "default")
    if rope_type not in ROPE_TYPES:
        raise InvalidParameterError(
            "rope_scaling", f"rope_type must be one of {ROPE_TYPES}, got {rope_type!r}"
        )
    if rope_type == "longrope" and not {"long_factor", "short_factor"} <= override.keys():
        raise InvalidParameterError(
            "rope_scaling", "longrope needs long_factor and short_factor lists: pass --rope-scaling as JSON"
        )
    override["rope_type"] = rope_type
    factor = float(override.get("factor", 1.0)) if rope_type != "default" else 1.0
    new_max = override.pop("max_position_embeddings", None)
    original = int(override.get("original_max_position_embeddings", config.max_position_embeddings))
    if rope_type != "default":
        override["factor"] = factor
        if rope_type != "linear":
            override["original_max_position_embeddings"] = original
    if rope_type == "llama3":
        for key, value in _LLAMA3_DEFAULTS.items():
            override.setdefault(key, value)
    old = rope_parameters(config)
    if hasattr(config, "standardize_rope_params"):  # transformers 5
        override.setdefault("rope_theta", old["rope_theta"])
        if "partial_rotary_factor" in old:
            override.setdefault("partial_rotary_factor", old["partial_rotary_factor"])
        config.rope_parameters = override
    else:
        if "rope_theta" in override:
            config.rope_theta = override.pop("rope_theta")
        config.rope_scaling = override
    config.max_position_embeddings = int(new_max) if new_max is not None else int(original * factor)


def check_max_model_len(
    resolved: ResolvedModel, rope_scaling: dict[str, Any] | None, max_model_len: int | None
) -> int:
    """The context `load_model` will give this model, from its config alone (no weights): an
    InvalidParameterError past what its RoPE (with `rope_scaling`) supports, before loading. An
    architecture kvspill does not run is refused first, as `load_model` refuses it."""
    config = load_hf_config(resolved)
    get_model_class(architecture_of(config))
    if rope_scaling is not None:
        apply_rope_override(config, dict(rope_scaling))
    return _max_model_len(config, max_model_len)


def _max_model_len(config: PretrainedConfig, max_model_len: int | None) -> int:
    params = rope_parameters(config)
    limit = config.max_position_embeddings
    if params["rope_type"] == "dynamic" and "original_max_position_embeddings" not in params:
        # Dynamic NTK from the checkpoint: HF extends past max_position_embeddings by `factor`.
        limit = int(limit * float(params.get("factor", 1.0)))
    if max_model_len is None:
        return int(config.max_position_embeddings)
    if max_model_len > limit:
        raise InvalidParameterError(
            "max_model_len",
            f"--max-model-len {max_model_len} exceeds what this model's RoPE supports ({limit} positions). "
            f"Lower it, or extend the context with --rope-scaling, e.g. yarn:{-(-max_model_len // limit)}.",
        )
    return max_model_len


def _iter_safetensors(path: Path) -> Iterator[tuple[str, Tensor]]:
    """(HF name, CPU tensor) for every tensor of every shard, read lazily one at a time."""
    from safetensors import safe_open

    for shard in safetensors_files(path):
        try:
            with safe_open(str(shard), framework="pt", device="cpu") as f:
                for name in f.keys():
                    yield name, f.get_tensor(name)
        except (OSError, RuntimeError, ValueError) as e:
            raise ModelNotFoundError(
                f"Cannot read weights file {str(shard)!r}: {e}. Download the model again."
            ) from e
