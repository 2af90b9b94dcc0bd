"""GGUF weights: HF names for llama.cpp's tensors, dequantized or kept in their quantized blocks.

Two ways to load a GGUF file's tensors:
- dequantized (`iter_dequantized`): every tensor to float32 on the host, one at a time, then cast
  into the model's dense parameters (`--quantization none`; the CPU default without g++, which
  builds the CPU GGUF kernel).
  `kvspill models prepare` saves them once, cast to the CPU's dtype, in the GGUF cache
  (`save_dense_weights`); a load in that dtype maps them instead (`iter_dense`: -1.4 s of a
  2-core CPU start for the embedded model). The copy into the parameters casts both the same way;
- kept quantized (`install_quant_modules` on the `meta` model, then `load_quantized`): the
  linear layers and the embedding whose tensors are in a supported type (kernels/gguf_formats)
  become `QuantLinear`/`QuantEmbedding` before any memory is given to the model, so the dense
  weights never exist; their raw blocks are copied to the device as they are. Tensors in float
  types (norms, biases) and in types kvspill has no kernel for (e.g. Q3_K, IQ4_XS) load
  dequantized into dense parameters: the documented fallback, logged once per type.

llama.cpp permutes the rows of Q and K for the "llama" architecture (interleaved RoPE); they are
permuted back here (rows only: quantized blocks run along a row, so whole rows move) so that
HF's neox-style RoPE applies.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from transformers import PretrainedConfig

from kvspill.errors import ModelNotFoundError, UnsupportedModelError
from kvspill.gguf.cache import open_dequantized, save_dequantized
from kvspill.gguf.reader import read_gguf
from kvspill.kernels.gguf_formats import FORMATS, QuantizedWeight, check_supported
from kvspill.model.llama import PROJECTION_SHARDS, LlamaForCausalLM, replace_projections
from kvspill.model.parallel import VocabParallelEmbedding, shard_weight
from kvspill.model.quant import QuantEmbedding, QuantLinear

logger = logging.getLogger(__name__)

# GGUF tensor name (after `blk.N.`) -> HF name (after `model.layers.N.`): llama.cpp's names.
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# Precomputed RoPE factors (Llama 3.1 GGUFs); like transformers, RoPE comes from the config.
_SKIPPED = {"rope_freqs"}


def open_gguf(path: Path) -> Any:
    try:
        return read_gguf(path)
    except Exception as e:  # gguf raises ValueError / struct errors / OSError on bad files
        raise ModelNotFoundError(f"Cannot read GGUF file {str(path)!r}: {e}. Download it again.") from e


def hf_name(name: str) -> str | None:
    base, _, suffix = name.rpartition(".")  # suffix: weight | bias
    if base in _SKIPPED:
        return None
    if base in _TOP_NAMES:
        return f"{_TOP_NAMES[base]}.{suffix}"
    parts = base.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{suffix}"
    raise UnsupportedModelError(
        f"GGUF tensor {name!r} has no kvspill equivalent; this GGUF is not supported."
    )


def _arch(reader: Any) -> str:
    field = reader.fields.get("general.architecture")
    return str(field.contents()) if field is not None else ""


def _unpermute(w: Tensor, num_heads: int) -> Tensor:
    """Undo llama.cpp's Q/K row permutation. w: [num_heads * head_dim, ...] -> same shape."""
    # llama.cpp stores each head's rows as (pair, 2) interleaved; HF keeps (2, half) halves.
    half = w.shape[0] // num_heads // 2
    return w.reshape(num_heads, half, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


_PERMUTED = ("q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias")  # HF names _fix_rows may change


def _fix_rows(w: Tensor, gguf_name: str, arch: str, config: PretrainedConfig) -> Tensor:
    if arch == "llama" and gguf_name.endswith(("attn_q.weight", "attn_q.bias")):
        return _unpermute(w, config.num_attention_heads)
    if arch == "llama" and gguf_name.endswith(("attn_k.weight", "attn_k.bias")):
        return _unpermute(w, config.num_key_value_heads)
    return w


def iter_dequantized(reader: Any, config: PretrainedConfig) -> Iterator[tuple[str, Tensor]]:
    """(HF name, float32 CPU tensor) per GGUF tensor, dequantized one at a time."""
    from gguf import dequantize

    arch = _arch(reader)
    for tensor in reader.tensors:
        name = hf_name(tensor.name)
        if name is None:
            continue
        # A plain ndarray, not gguf's memmap subclass (whose per-view hook costs ~0.5 s per load).
        stored = np.asarray(tensor.data)
        if name.endswith(_PERMUTED):  # whole rows move: permute the stored rows, 4-8x smaller than fp32
            rows = torch.from_numpy(np.array(stored))
            stored = _fix_rows(rows, tensor.name, arch, config).numpy()
        data = dequantize(stored, tensor.tensor_type)
        yield name, torch.from_numpy(np.require(data, dtype=np.float32, requirements=["C", "W"]))


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def iter_dense(
    reader: Any, path: Path, config: PretrainedConfig, dtype: torch.dtype
) -> Iterator[tuple[str, Tensor]]:
    """The dense weights of the GGUF file `path`: those `save_dense_weights` saved in `dtype` when
    valid, else dequantized now (float32; the copy into `dtype` parameters casts them as the save did)."""
    saved = open_dequantized(path, _dtype_name(dtype))
    if saved is not None:
        logger.debug("GGUF weights from the dequantized copy in the cache (%s)", dtype)
        return saved
    return iter_dequantized(reader, config)


def save_dense_weights(path: Path, config: PretrainedConfig, dtype: torch.dtype) -> Path | None:
    """Dequantize the GGUF file `path` into the cache in `dtype` (`kvspill models prepare`); returns
    the file written, None when the cache is off or cannot be written."""
    reader = open_gguf(path)
    tensors = ((name, tensor.to(dtype)) for name, tensor in iter_dequantized(reader, config))
    return save_dequantized(path, _dtype_name(dtype), tensors)


def _quantized_types(reader: Any) -> dict[str, str]:
    """HF name -> GGUF type of every 2-D tensor kept quantized (a supported type); warns about the rest."""
    kept: dict[str, str] = {}
    fallback: set[str] = set()
    for tensor in reader.tensors:
        name, qtype = hf_name(tensor.name), tensor.tensor_type.name
        if name is None or len(tensor.shape) != 2:
            continue
        if qtype in FORMATS:
            kept[name] = qtype
        elif qtype not in ("F32", "F16", "BF16"):
            fallback.add(qtype)
    for qtype in sorted(fallback):
        logger.warning(
            "GGUF type %s has no quantized kernel in kvspill (supported: %s): its tensors are dequantized at load",
            qtype, ", ".join(FORMATS),
        )  # fmt: skip
    return kept


def install_quant_modules(model: LlamaForCausalLM, reader: Any, dtype: torch.dtype) -> None:
    """Swap in quantized modules wherever every shard's tensor is kept quantized (on `meta`, before
    `to_empty`, so the dense weights are never allocated)."""
    kept = _quantized_types(reader)

    def make(i: int, name: str, dense: nn.Linear, out_sizes: list[int]) -> nn.Module | None:
        if not all(f"model.layers.{i}.{shard}.weight" in kept for shard in PROJECTION_SHARDS[name]):
            return None  # a shard in a float or unsupported type: the whole projection loads dense
        return QuantLinear(dense.in_features, out_sizes, dense.bias is not None, dtype)

    replace_projections(model, make)
    embed = model.model.embed_tokens
    assert isinstance(embed, (nn.Embedding, VocabParallelEmbedding))
    if "model.embed_tokens.weight" in kept:
        model.model.embed_tokens = QuantEmbedding(embed.num_embeddings, embed.embedding_dim, dtype, model.tp)
        if model.tie_word_embeddings:
            model.lm_head = model.model.embed_tokens
    if not model.tie_word_embeddings and "lm_head.weight" in kept:
        head = model.lm_head
        assert isinstance(head, nn.Linear)
        model.lm_head = QuantLinear(head.in_features, [head.out_features], False, dtype)


def _quant_target(model: LlamaForCausalLM, name: str) -> tuple[nn.Module, int] | None:
    """The quantized module that takes HF weight `name`, and the shard index in it."""
    module_name = name.removesuffix(".weight")
    for fused, shards in PROJECTION_SHARDS.items():
        for index, shard in enumerate(shards):
            if module_name.endswith("." + shard):
                module_name = module_name[: -len(shard)] + fused
                module = model.get_submodule(module_name)
                return (module, index) if isinstance(module, QuantLinear) else None
    module = model.get_submodule(module_name)
    return (module, 0) if isinstance(module, (QuantLinear, QuantEmbedding)) else None


def load_quantized(
    model: LlamaForCausalLM, reader: Any, config: PretrainedConfig, device: torch.device
) -> set[str]:
    """Fill the model: quantized modules with raw blocks, dense parameters dequantized. Returns the
    HF names loaded (the dense ones through `model.load_weights`)."""
    from gguf import dequantize

    arch = _arch(reader)
    shards: dict[nn.Module, dict[int, QuantizedWeight]] = {}
    loaded: set[str] = set()
    for tensor in reader.tensors:
        name = hf_name(tensor.name)
        if name is None:
            continue
        target = _quant_target(model, name) if name.endswith(".weight") else None
        if target is None:
            data = dequantize(tensor.data, tensor.tensor_type)
            dense = torch.from_numpy(np.require(data, dtype=np.float32, requirements=["C", "W"]))
            loaded |= model.load_weights([(name, _fix_rows(dense, tensor.name, arch, config))])
            continue
        raw = torch.from_numpy(np.array(tensor.data, dtype=np.uint8, copy=True))
        raw = _fix_rows(raw.reshape(raw.shape[0], -1), tensor.name, arch, config)
        qtype = tensor.tensor_type.name
        raw = shard_weight(name, raw, model.tp, (qtype, check_supported(qtype).type_size))  # this rank's
        module, index = target
        shards.setdefault(module, {})[index] = QuantizedWeight.from_raw(
            raw.to(device), tensor.tensor_type.name
        )
        loaded.add(name)
    for module, by_index in shards.items():
        if isinstance(module, QuantEmbedding):
            module.set_weight(by_index[0])
        else:
            assert isinstance(module, QuantLinear)
            if sorted(by_index) != list(range(len(module.out_sizes))):
                raise ModelNotFoundError("the GGUF file lacks a shard of a fused q/k/v or gate/up weight")
            module.set_weight([by_index[i] for i in range(len(module.out_sizes))])
    if model.tie_word_embeddings and isinstance(model.model.embed_tokens, QuantEmbedding):
        loaded.add("lm_head.weight")
    return loaded


def check_quantized_complete(model: LlamaForCausalLM, path: Path) -> None:
    """Every quantized module got its blocks (a file missing a tensor is an error, never empty memory)."""
    for module_name, module in model.named_modules():
        empty = (isinstance(module, QuantLinear) and not module.parts) or (
            isinstance(module, QuantEmbedding) and module.qweight is None
        )
        if empty:
            raise ModelNotFoundError(
                f"The GGUF file {str(path)!r} lacks the weight of {module_name}: the file is incomplete."
            )
