"""Our Llama / Qwen2 / Qwen3 against transformers on tiny random-weight checkpoints (float32)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvspill.errors import InvalidParameterError, UnsupportedModelError
from kvspill.model.base import AttentionFn, CausalLM
from kvspill.model.layers import rope_table_bytes
from kvspill.model.llama import LlamaForCausalLM
from kvspill.model.loader import load_model
from kvspill.model.resolve import resolve_model
from kvspill.plan.spec import ModelSpec

TOL = 1e-4
SEQ_A = [1, 17, 9, 30, 5, 8, 100, 3, 44, 12, 7, 250, 61]
SEQ_B = [1, 200, 33, 4, 90, 91]

CPU = torch.device("cpu")


def _hf(path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()


@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_qwen2_dir", "tiny_qwen3_dir"])
def test_tiny_logits_match_hf(fixture: str, request: pytest.FixtureRequest, logits_of, hf_logits_of) -> None:
    path = request.getfixturevalue(fixture)
    loaded = load_model(resolve_model(str(path)), CPU, torch.float32)
    hf = _hf(path)
    assert isinstance(loaded.model, CausalLM)
    ref_a, ref_b = hf_logits_of(hf, SEQ_A), hf_logits_of(hf, SEQ_B)
    ours_a = logits_of(loaded.model, [SEQ_A])
    assert ours_a.dtype == torch.float32 and ours_a.shape == (len(SEQ_A), loaded.vocab_size)
    assert (ours_a - ref_a).abs().max().item() <= TOL
    # Two sequences flattened into one step: same logits as each alone.
    both = logits_of(loaded.model, [SEQ_A, SEQ_B])
    assert (both[: len(SEQ_A)] - ref_a).abs().max().item() <= TOL
    assert (both[len(SEQ_A) :] - ref_b).abs().max().item() <= TOL


def test_loaded_summary(tiny_llama_dir: Path, tiny_qwen3_dir: Path) -> None:
    llama = load_model(resolve_model(str(tiny_llama_dir)), CPU, torch.float32)
    assert llama.architecture == "LlamaForCausalLM"
    assert (llama.num_layers, llama.num_heads, llama.num_kv_heads, llama.head_dim) == (3, 4, 2, 16)
    assert (llama.hidden_size, llama.vocab_size, llama.max_model_len) == (64, 256, 1024)
    assert not llama.model.training
    assert all(not p.requires_grad for p in llama.model.parameters())
    # Sharded qwen3, bf16, shorter max_model_len: the RoPE table follows max_model_len.
    qwen3 = load_model(resolve_model(str(tiny_qwen3_dir)), CPU, torch.bfloat16, max_model_len=64)
    assert qwen3.max_model_len == 64 and qwen3.dtype == torch.bfloat16
    assert qwen3.model.model.rotary_emb.cos_sin_cache.shape == (64, 16)
    assert qwen3.model.model.rotary_emb.cos_sin_cache.dtype == torch.float32
    assert {p.dtype for p in qwen3.model.parameters()} == {torch.bfloat16}
    assert qwen3.model.model.layers[0].self_attn.q_norm is not None


def test_the_plan_counts_the_rope_table_the_model_holds(tiny_llama_dir: Path) -> None:
    """The plan charges the table from the shapes and the context (the engine's measured weights
    on CUDA exclude it): the estimate is the buffer's size at any max_model_len."""
    for max_len in (None, 300):
        loaded = load_model(resolve_model(str(tiny_llama_dir)), CPU, torch.float32, max_model_len=max_len)
        spec = ModelSpec.from_hf_config(loaded.hf_config.to_dict())
        assert rope_table_bytes(loaded.model) == spec.rope_table_bytes(loaded.max_model_len)
        assert rope_table_bytes(loaded.model) == loaded.max_model_len * 16 * 4  # fp32 [positions, head_dim]


def test_attention_gets_post_rope_shapes(tiny_qwen2_dir: Path) -> None:
    loaded = load_model(resolve_model(str(tiny_qwen2_dir)), CPU, torch.float32)
    calls: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = []

    def attention(layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        calls.append((layer_idx, tuple(q.shape), tuple(k.shape)))
        return torch.zeros_like(q)

    fn: AttentionFn = attention
    with torch.inference_mode():
        hidden = loaded.model(torch.tensor([1, 2, 3]), torch.tensor([0, 1, 2]), fn)
    assert hidden.shape == (3, 64)
    assert calls == [(0, (3, 4, 16), (3, 2, 16)), (1, (3, 4, 16), (3, 2, 16))]


@pytest.mark.parametrize("rope_type", ["default", "linear", "dynamic", "yarn", "llama3", "longrope"])
def test_llama_variants_in_memory(rope_type: str, logits_of, hf_logits_of) -> None:
    """head_dim != hidden/heads, attention_bias, mlp_bias, tied embeddings, every rope type."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    scaling = {
        "default": None,
        "linear": {"rope_type": "linear", "factor": 2.0},
        "dynamic": {"rope_type": "dynamic", "factor": 2.0},
        "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
        "llama3": {
            "rope_type": "llama3",
            "factor": 4.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
        "longrope": {
            "rope_type": "longrope",
            "long_factor": [1.0 + i for i in range(16)],
            "short_factor": [1.0 + 0.1 * i for i in range(16)],
            "original_max_position_embeddings": 64,
        },
    }[rope_type]
    config = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, attention_bias=True, mlp_bias=True, tie_word_embeddings=True,
        max_position_embeddings=128, rope_scaling=scaling, initializer_range=0.1,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        hf = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
        with torch.no_grad():
            for name, p in hf.named_parameters():
                if name.endswith(".bias"):
                    p.copy_(0.2 * torch.randn_like(p))
    # longrope picks long factors when max_model_len > original (64): compare past and within it.
    for max_model_len, seq_len in [(None, 70), (64, 40)] if rope_type == "longrope" else [(None, 70)]:
        with torch.device("meta"):
            ours = LlamaForCausalLM(config, max_model_len=max_model_len, dtype=torch.float32)
        ours.to_empty(device=CPU)
        ours.init_buffers()
        loaded = ours.load_weights(hf.state_dict().items())
        assert loaded == ours.expected_weight_names()
        assert ours.lm_head.weight is ours.model.embed_tokens.weight
        seq = [(7 * i) % 128 for i in range(seq_len)]
        assert (logits_of(ours, [seq]) - hf_logits_of(hf, seq)).abs().max().item() <= TOL


def test_rope_override_raises_max_positions(tiny_llama_dir: Path) -> None:
    resolved = resolve_model(str(tiny_llama_dir))  # trained for 1024 positions
    loaded = load_model(resolved, CPU, torch.float32, rope_scaling={"rope_type": "yarn", "factor": 4})
    params = loaded.hf_config.rope_parameters
    assert params["rope_type"] == "yarn" and params["original_max_position_embeddings"] == 1024
    assert loaded.hf_config.max_position_embeddings == 4096 and loaded.max_model_len == 4096
    assert loaded.model.model.rotary_emb.cos_sin_cache.shape == (4096, 16)
    # An explicit max_model_len wins; past the (raised) limit is an error saying what to do.
    shorter = load_model(
        resolved, CPU, torch.float32, rope_scaling={"type": "linear", "factor": 2}, max_model_len=1200
    )
    assert shorter.max_model_len == 1200 and shorter.hf_config.max_position_embeddings == 2048
    with pytest.raises(InvalidParameterError, match="--rope-scaling"):
        load_model(resolved, CPU, torch.float32, max_model_len=4000)


def test_sliding_window_rejected_unless_covered() -> None:
    from transformers import MistralConfig, Qwen2Config

    mistral = MistralConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, sliding_window=1024,
    )  # fmt: skip
    with pytest.raises(UnsupportedModelError, match="--max-model-len 1024"):
        LlamaForCausalLM.check_supported(mistral, None)
    LlamaForCausalLM.check_supported(mistral, 1024)
    mistral.sliding_window = None
    LlamaForCausalLM.check_supported(mistral, None)
    qwen = Qwen2Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, use_sliding_window=True, sliding_window=32, max_window_layers=1,
    )  # fmt: skip
    with pytest.raises(UnsupportedModelError, match="sliding-window"):
        LlamaForCausalLM.check_supported(qwen, 256)
    LlamaForCausalLM.check_supported(Qwen2Config(hidden_size=64, num_attention_heads=4), None)


def test_unsupported_architecture_names_supported(tmp_path: Path) -> None:
    import json

    from safetensors.torch import save_file

    config = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "n_layer": 1,
        "n_embd": 8,
        "n_head": 2,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file({"wte.weight": torch.zeros(4, 8)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(UnsupportedModelError) as info:
        load_model(resolve_model(str(tmp_path)), CPU, torch.float32)
    message = str(info.value)
    assert "GPT2LMHeadModel" in message
    for arch in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"):
        assert arch in message


def test_direct_construction_bf16_matches_hf_bf16(tiny_qwen3_dir: Path, logits_of, hf_logits_of) -> None:
    """Built straight on the device in bf16 (no meta), loaded from an HF state dict.

    Same ops in the same order as HF, so bf16 logits agree (bit-exact on the CPU we test on).
    """
    from transformers import AutoModelForCausalLM

    from kvspill.model.qwen3 import Qwen3ForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(tiny_qwen3_dir), dtype=torch.bfloat16).eval()
    with torch.device("cpu"):
        ours = Qwen3ForCausalLM(hf.config, dtype=torch.bfloat16)
    ours.load_weights(hf.state_dict().items())
    ours.eval()
    assert (logits_of(ours, [SEQ_A]) - hf_logits_of(hf, SEQ_A)).abs().max().item() <= 1e-2
