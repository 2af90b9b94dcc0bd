"""GGUF weights kept in their quantized blocks: the embedded SmolLM2 (Q4_1) against its dequantized self."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvspill.config import EngineConfig
from kvspill.errors import InvalidParameterError
from kvspill.kernels.gguf_formats import dequantize_ref
from kvspill.llm import LLM
from kvspill.model.quant import QuantEmbedding, QuantLinear, model_weight_bytes
from kvspill.sampling_params import SamplingParams

PROMPTS = [
    "def fibonacci(n):",
    "The capital of France is",
    "SELECT name FROM users WHERE",
    "Once upon a time",
]


@pytest.fixture(scope="module")
def smollm2_both(smollm2_gguf_path: Path) -> dict[str, LLM]:
    # fp16 compute pinned: "auto" on the CPU is measured per host (fp16 or fp32), and the byte
    # ratio and logit tolerances below are for fp16 dense weights.
    return {
        q: LLM(device="cpu", quantization=q, max_model_len=256, dtype="float16") for q in ("none", "gguf")
    }


def test_quantized_smollm2_gives_the_dequantized_models_greedy_tokens(smollm2_both: dict[str, LLM]) -> None:
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    tokens = {q: [o.token_ids for o in llm.generate(PROMPTS, params)] for q, llm in smollm2_both.items()}
    assert tokens["gguf"] == tokens["none"]
    assert all(len(t) == 8 for t in tokens["gguf"])


def test_quantized_weights_take_about_a_third_of_the_dense_bytes(smollm2_both: dict[str, LLM]) -> None:
    dense = smollm2_both["none"].engine
    quant = smollm2_both["gguf"].engine
    model = quant.bundle.loaded.model
    assert not any(isinstance(m, (QuantLinear, QuantEmbedding)) for m in dense.bundle.loaded.model.modules())
    kinds = {type(m) for m in model.modules()}
    assert QuantLinear in kinds and QuantEmbedding in kinds
    assert model.lm_head is model.model.embed_tokens  # tied: one quantized tensor
    ratio = model_weight_bytes(model) / model_weight_bytes(dense.bundle.loaded.model)
    assert 0.25 <= ratio <= 0.4, ratio  # Q4_1 is 5 bits a weight; the file keeps a few tensors wider
    # The plan that sized the KV pools counted the quantized bytes.
    assert quant.memory_plan.weight_bytes == model_weight_bytes(model)
    assert dense.memory_plan.weight_bytes == model_weight_bytes(dense.bundle.loaded.model)


def test_logits_match_the_dequantized_model(smollm2_both: dict[str, LLM]) -> None:
    ids = torch.tensor([1, 2, 3, 100, 2000])
    hidden = {q: llm.engine.bundle.loaded.model.model.embed_tokens(ids) for q, llm in smollm2_both.items()}
    torch.testing.assert_close(hidden["gguf"], hidden["none"], rtol=0, atol=0)
    x = torch.randn(3, 576, generator=torch.Generator().manual_seed(0)).to(torch.float16)
    logits = {q: llm.engine.bundle.loaded.model.compute_logits(x) for q, llm in smollm2_both.items()}
    qweight = smollm2_both["gguf"].engine.bundle.loaded.model.lm_head.qweight
    exact = (
        x.float() @ dequantize_ref(qweight.data, qweight.qtype, qweight.in_features).T
    )  # the file's values
    # The quantized lm_head multiplies the file's weights in fp32 (kernels/cpu_gguf.py): the exact
    # logits rounded once to fp16. The dense model rounds its weights to fp16 first: further off.
    torch.testing.assert_close(logits["gguf"], exact, rtol=2**-10, atol=1e-3)
    assert (logits["gguf"] - exact).abs().max() <= (logits["none"] - exact).abs().max()
    torch.testing.assert_close(logits["gguf"], logits["none"], rtol=2e-3, atol=1e-2)


def test_quantization_values_are_checked(tiny_llama_dir: Path) -> None:
    with pytest.raises(InvalidParameterError, match="--quantization must be one of none, gguf, fp8"):
        EngineConfig(quantization="q4")
    with pytest.raises(InvalidParameterError, match="needs a .gguf model"):
        LLM(str(tiny_llama_dir), device="cpu", quantization="gguf")
