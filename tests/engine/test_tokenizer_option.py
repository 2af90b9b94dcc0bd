"""--tokenizer (vLLM's): the tokenizer and chat template of another directory, .gguf file or cached
Hugging Face id; one whose ids do not fit the model's vocabulary is refused before serving."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvspill.errors import ModelNotFoundError, UnsupportedModelError
from kvspill.llm import LLM
from kvspill.model.resolve import resolve_tokenizer
from kvspill.sampling_params import SamplingParams

MESSAGES = [{"role": "user", "content": "hi cat"}]


def _tokenizer_only(model: Path, dst: Path, template: str) -> Path:
    dst.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (model / name).is_file():
            shutil.copy(model / name, dst / name)
    config = json.loads((dst / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (dst / "tokenizer_config.json").write_text(json.dumps(config))
    (dst / "chat_template.jinja").unlink(missing_ok=True)
    return dst


def test_the_tokenizer_and_its_template_come_from_the_option(tiny_llama_dir: Path, tmp_path: Path):
    from transformers import AutoTokenizer

    tok_dir = _tokenizer_only(
        tiny_llama_dir, tmp_path / "tok", "{% for m in messages %}hello {{ m['content'] }}{% endfor %}"
    )
    own = LLM(str(tiny_llama_dir), device="cpu", dtype="float32", max_model_len=64)
    other = LLM(str(tiny_llama_dir), device="cpu", dtype="float32", max_model_len=64, tokenizer=str(tok_dir))
    ids = other.chat_prompt(MESSAGES)
    assert ids != own.chat_prompt(MESSAGES)
    assert ids == AutoTokenizer.from_pretrained(str(tok_dir)).encode("hello hi cat")
    assert other.generate([ids], SamplingParams(max_tokens=2, temperature=0))[0].num_output_tokens >= 1


def test_a_larger_vocabulary_is_refused(tiny_llama_dir: Path, smollm2_gguf_path: Path):
    with pytest.raises(UnsupportedModelError, match="more than the 256 of"):
        LLM(
            str(tiny_llama_dir),
            device="cpu",
            dtype="float32",
            max_model_len=64,
            tokenizer=str(smollm2_gguf_path),
        )


def test_resolve_tokenizer(tmp_path: Path, smollm2_gguf_path: Path):
    assert resolve_tokenizer(str(smollm2_gguf_path)).kind == "gguf"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="has none of tokenizer.json"):
        resolve_tokenizer(str(tmp_path / "empty"))
    with pytest.raises(ModelNotFoundError, match="huggingface-cli download org/nothing-here"):
        resolve_tokenizer("org/nothing-here", hf_cache_dir=tmp_path)
