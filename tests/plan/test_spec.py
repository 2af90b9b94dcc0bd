"""ModelSpec: exact parameter counts and KV sizes from HF configs, GGUF headers and known shapes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from kvspill.errors import ModelNotFoundError, UnsupportedModelError
from kvspill.plan.spec import KNOWN_SHAPES, ModelSpec, embedded_gguf_path

HF_PEER = Path("/work/shared/bench/hf_peer.py")

LLAMA_8B_CONFIG = {  # Llama-3.1-8B config.json as transformers 4.x writes it
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "torch_dtype": "bfloat16",
    "attention_bias": False,
    "mlp_bias": False,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}


def test_llama_8b_kv_bytes_params_and_weights() -> None:
    spec = KNOWN_SHAPES["llama-8b"]
    assert spec.kv_bytes_per_token(2) == 32 * 2 * 8 * 128 * 2 == 131072
    # By hand from the shapes: embeddings and an untied lm_head, 128256 x 4096 each;
    # per layer q 4096x4096, k and v 4096x1024, o 4096x4096, gate/up/down 4096x14336, 2 norms of 4096;
    # one final norm of 4096.
    embed = 128256 * 4096  # 525,336,576
    layer = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336 + 2 * 4096  # 218,112,000
    assert embed == 525_336_576 and layer == 218_112_000
    assert spec.num_params == 2 * embed + 32 * layer + 4096 == 8_030_261_248
    assert spec.weight_bytes(2) == 16_060_522_496
    assert spec.weight_bytes(4) == 2 * spec.weight_bytes(2)


def test_hf_config_4x_keys_match_known_shape() -> None:
    spec = ModelSpec.from_hf_config(LLAMA_8B_CONFIG, name="meta-llama/Llama-3.1-8B")
    assert spec.num_params == KNOWN_SHAPES["llama-8b"].num_params
    assert spec.head_dim == 128 and spec.weight_dtype_bytes == 2 and not spec.tie_word_embeddings


def test_hf_config_5x_keys() -> None:
    config = {
        k: v for k, v in LLAMA_8B_CONFIG.items() if k not in ("torch_dtype", "rope_scaling", "rope_theta")
    }
    config.update(dtype="float32", head_dim=128, rope_parameters={"rope_type": "llama3", "rope_theta": 5e5})
    spec = ModelSpec.from_hf_config(config)
    assert spec.weight_dtype_bytes == 4 and spec.num_params == 8_030_261_248


def test_hf_config_nested_text_config_and_unsupported() -> None:
    nested = {"model_type": "llava", "text_config": LLAMA_8B_CONFIG}
    assert ModelSpec.from_hf_config(nested).num_layers == 32
    with pytest.raises(UnsupportedModelError, match="mixtral"):
        ModelSpec.from_hf_config({**LLAMA_8B_CONFIG, "model_type": "mixtral"})
    with pytest.raises(UnsupportedModelError, match="intermediate_size"):
        ModelSpec.from_hf_config({k: v for k, v in LLAMA_8B_CONFIG.items() if k != "intermediate_size"})


def _meta_param_count(config: object, model_cls: type) -> int:
    import torch

    with torch.device("meta"):
        model = model_cls(config)
    return sum(p.numel() for p in model.parameters())


def test_param_counts_equal_transformers_models() -> None:
    """Qwen2 (q/k/v bias), Qwen3 (q/k norms), tied and untied Llama: count like transformers does."""
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    small = dict(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=3,
        num_attention_heads=8,
        num_key_value_heads=2,
        vocab_size=1000,
    )
    cases = [
        (LlamaConfig(**small, tie_word_embeddings=True), LlamaForCausalLM),
        (LlamaConfig(**small, attention_bias=True, mlp_bias=True), LlamaForCausalLM),
        (Qwen2Config(**small), Qwen2ForCausalLM),
        (Qwen3Config(**small, head_dim=48), Qwen3ForCausalLM),
    ]
    for config, model_cls in cases:
        spec = ModelSpec.from_hf_config(config.to_dict())
        assert spec.num_params == _meta_param_count(config, model_cls), config.model_type
    for name, spec in KNOWN_SHAPES.items():
        shape = dict(
            hidden_size=spec.hidden_size,
            intermediate_size=spec.intermediate_size,
            num_hidden_layers=spec.num_layers,
            num_attention_heads=spec.num_heads,
            num_key_value_heads=spec.num_kv_heads,
            head_dim=spec.head_dim,
            vocab_size=spec.vocab_size,
            tie_word_embeddings=spec.tie_word_embeddings,
        )
        assert spec.num_params == _meta_param_count(LlamaConfig(**shape), LlamaForCausalLM), name


@pytest.mark.skipif(not HF_PEER.is_file(), reason="shared/bench/hf_peer.py not present")
def test_known_shapes_are_the_bench_workloads() -> None:
    module_spec = importlib.util.spec_from_file_location("hf_peer", HF_PEER)
    assert module_spec is not None and module_spec.loader is not None
    peer = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(peer)
    assert set(peer.SHAPES) == set(KNOWN_SHAPES)
    for name, shape in peer.SHAPES.items():
        spec = ModelSpec.from_hf_config({"model_type": "llama", **shape})
        assert spec.num_params == KNOWN_SHAPES[name].num_params
        assert spec.kv_bytes_per_token(2) == KNOWN_SHAPES[name].kv_bytes_per_token(2)


@pytest.fixture(scope="module")
def smollm2() -> ModelSpec:
    return ModelSpec.from_model_arg(None)


def test_embedded_gguf_header(smollm2: ModelSpec) -> None:
    s = smollm2
    assert (s.architecture, s.num_layers, s.hidden_size, s.intermediate_size) == ("llama", 30, 576, 1536)
    assert (s.num_heads, s.num_kv_heads, s.head_dim, s.vocab_size) == (9, 3, 64, 49152)
    assert s.tie_word_embeddings and not s.qkv_bias and s.max_position_embeddings == 8192
    assert s.kv_bytes_per_token(2) == 30 * 2 * 3 * 64 * 2 == 23040
    # 49152*576 embeddings + 30 layers of (q 576x576, k/v 576x192, o 576x576, 3 x 576x1536, 2 norms) + norm
    assert s.num_params == 49152 * 576 + 30 * (2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536 + 2 * 576) + 576
    assert s.num_params == 134_515_008
    assert s.weight_dtype_bytes is None  # Q4_1 / Q8_0: quantized
    assert s.stored_weight_bytes is not None and 0.5e8 < s.stored_weight_bytes < s.weight_bytes(2)


def test_gguf_counts_match_file_and_transformers(smollm2: ModelSpec) -> None:
    from transformers import AutoConfig

    from kvspill.gguf.fast import FastGGUFReader  # gguf's tensors (tests/model/test_gguf_fast.py), fast

    path = embedded_gguf_path()
    reader = FastGGUFReader(path)
    assert smollm2.num_params == sum(int(t.n_elements) for t in reader.tensors)
    assert smollm2.stored_weight_bytes == sum(int(t.n_bytes) for t in reader.tensors)
    config = AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
    from_transformers = ModelSpec.from_hf_config(config.to_dict())
    assert from_transformers.num_params == smollm2.num_params
    assert from_transformers.kv_bytes_per_token(2) == smollm2.kv_bytes_per_token(2)


def test_model_arg_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model_dir = tmp_path / "llama"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(LLAMA_8B_CONFIG))
    assert ModelSpec.from_model_arg(str(model_dir)).num_params == 8_030_261_248
    assert ModelSpec.from_model_arg(str(model_dir / "config.json")).num_layers == 32
    assert ModelSpec.from_model_arg("llama-3b") is KNOWN_SHAPES["llama-3b"]
    gguf_dir = tmp_path / "gguf"
    gguf_dir.mkdir()
    (gguf_dir / "m.gguf").symlink_to(embedded_gguf_path())
    assert ModelSpec.from_model_arg(str(gguf_dir)).num_layers == 30
    with pytest.raises(ModelNotFoundError, match="known shape"):
        ModelSpec.from_model_arg("no-such-model")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UnsupportedModelError, match="not valid JSON"):
        ModelSpec.from_model_arg(str(tmp_path / "bad.json"))


def test_hf_id_from_local_cache_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="local cache"):
        ModelSpec.from_model_arg("meta-llama/Llama-3.1-8B")
    repo = tmp_path / "models--meta-llama--Llama-3.1-8B"
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text(json.dumps(LLAMA_8B_CONFIG))
    spec = ModelSpec.from_model_arg("meta-llama/Llama-3.1-8B")
    assert spec.name == "meta-llama/Llama-3.1-8B" and spec.num_params == 8_030_261_248
