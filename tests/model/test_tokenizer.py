"""TokenizerBundle on the tiny offline tokenizers: eos ids, bos, chat template, FIM tokens."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvspill.errors import UnsupportedModelError
from kvspill.model.resolve import resolve_model
from kvspill.text.tokenizer import load_tokenizer


def test_tiny_bundle(tiny_llama_dir: Path) -> None:
    bundle = load_tokenizer(resolve_model(str(tiny_llama_dir)))
    # config.json / generation_config.json eos [2, 4]; tokenizer eos <|im_end|> = 4
    assert bundle.eos_token_ids == frozenset({2, 4})
    assert bundle.bos_token_id == 1
    ids = bundle.apply_chat_template([{"role": "user", "content": "hello world"}])
    vocab = bundle.hf.get_vocab()
    assert ids == [
        vocab[t]
        for t in ["<|im_start|>", "user", "hello", "world", "<|im_end|>", "<|im_start|>", "assistant"]
    ]
    fim = bundle.fim_tokens
    assert fim is not None and fim.prefix == "<|fim_prefix|>" and fim.middle_id == vocab["<|fim_middle|>"]


def test_generation_config_eos_is_added(tmp_path: Path, tiny_qwen3_dir: Path) -> None:
    shutil.copytree(tiny_qwen3_dir, tmp_path / "m")
    (tmp_path / "m" / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 7]}))
    bundle = load_tokenizer(resolve_model(str(tmp_path / "m")))
    assert bundle.eos_token_ids == frozenset({2, 4, 7})


def test_no_chat_template_is_a_clear_error(tmp_path: Path, tiny_llama_dir: Path) -> None:
    shutil.copytree(tiny_llama_dir, tmp_path / "m")
    (tmp_path / "m" / "chat_template.jinja").unlink()
    config = json.loads((tmp_path / "m" / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (tmp_path / "m" / "tokenizer_config.json").write_text(json.dumps(config))
    bundle = load_tokenizer(resolve_model(str(tmp_path / "m")))
    assert bundle.chat_template is None
    with pytest.raises(UnsupportedModelError, match="no chat template"):
        bundle.apply_chat_template([{"role": "user", "content": "hi"}])
