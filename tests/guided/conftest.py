"""A tiny random-weight Llama with SmolLM2's real byte-level tokenizer (49,152 tokens): guided
decoding sees a real vocabulary while a step costs milliseconds."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_smol_vocab_dir(tmp_path_factory: pytest.TempPathFactory, smollm2_gguf_path: Path) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    path = tmp_path_factory.mktemp("tiny_smol_vocab")
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_gguf_path.parent), gguf_file=smollm2_gguf_path.name)
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path
