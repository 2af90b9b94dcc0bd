"""The embedded SmolLM2-135M-Instruct (Q4_1 GGUF): our load vs transformers' load of the same file."""

from __future__ import annotations

import pytest
import torch

TOL = 1e-4
PROMPT = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28]
OTHER = [1, 4093, 198, 6004, 2, 198, 1, 520, 9531, 198]


def test_smollm2_summary(smollm2_loaded) -> None:
    lm = smollm2_loaded
    assert lm.architecture == "LlamaForCausalLM"
    assert (lm.num_layers, lm.num_heads, lm.num_kv_heads, lm.head_dim) == (30, 9, 3, 64)
    assert (lm.hidden_size, lm.vocab_size, lm.max_model_len) == (576, 49152, 8192)
    assert lm.model.lm_head.weight is lm.model.model.embed_tokens.weight  # tied


@pytest.mark.slow  # transformers' load of the GGUF: about 30 s
def test_smollm2_logits_match_transformers(smollm2_loaded, smollm2_hf, logits_of, hf_logits_of) -> None:
    ref_a, ref_b = hf_logits_of(smollm2_hf, PROMPT), hf_logits_of(smollm2_hf, OTHER)
    ours = logits_of(smollm2_loaded.model, [PROMPT])
    assert (ours - ref_a).abs().max().item() <= TOL
    both = logits_of(smollm2_loaded.model, [PROMPT, OTHER])
    assert (both[: len(PROMPT)] - ref_a).abs().max().item() <= TOL
    assert (both[len(PROMPT) :] - ref_b).abs().max().item() <= TOL
    assert torch.equal(both[-1].argmax(), ref_b[-1].argmax())


def test_smollm2_tokenizer_bundle(smollm2_tokenizer, smollm2_hf_tokenizer) -> None:
    bundle = smollm2_tokenizer
    reference = smollm2_hf_tokenizer
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    expected = reference.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert bundle.apply_chat_template(messages) == list(expected)
    with_system = [{"role": "system", "content": "Be brief."}, *messages]
    ids = bundle.apply_chat_template(with_system)
    assert ids[:1] == [1] and ids[-4:] == bundle.encode("<|im_start|>assistant\n", add_special_tokens=False)
    assert 2 in bundle.eos_token_ids  # <|im_end|>
    assert bundle.hf.convert_ids_to_tokens(2) == "<|im_end|>"
    assert bundle.chat_template is not None and bundle.bos_token_id == 1
    assert bundle.add_bos_token is False
    assert bundle.fim_tokens is None
    assert bundle.decode(bundle.encode("Hello world")) == "Hello world"
