"""`tools` on a model whose template has no tool support and takes no system message (Mistral-7B-
Instruct v0.1/v0.2: "Conversation roles must alternate"): the generic tools text goes in front of
the first user message, and the conversation renders as HF and vLLM render it (no error). A template's
own refusal is a ChatTemplateError (a KvspillError, a ValueError), never jinja's exception."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kvspill.errors import ChatTemplateError, InvalidParameterError, KvspillError
from kvspill.model.resolve import resolve_model
from kvspill.text.chat_templates import GENERIC_INSTRUCTION, choose_chat_template
from kvspill.text.tokenizer import TokenizerBundle, load_tokenizer

STRICT = (
    "{{- bos_token }}{%- for message in messages %}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif %}"
    "{%- if message['role'] == 'user' %}{{- '[INST] ' + message['content'] + ' [/INST]' }}"
    "{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] + eos_token}}"
    "{%- else %}{{- raise_exception('Only user and assistant roles are supported!') }}{%- endif %}{%- endfor %}"
)
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
    }
]


@pytest.fixture
def strict_dir(tmp_path: Path, tiny_llama_dir: Path) -> Path:
    model = tmp_path / "m"
    shutil.copytree(tiny_llama_dir, model)
    (model / "chat_template.jinja").unlink()
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["chat_template"] = STRICT
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    return model


def _served(model: Path) -> TokenizerBundle:
    """The bundle with the template the engine serves (wrapped for tools)."""
    bundle = load_tokenizer(resolve_model(str(model)))
    return replace(bundle, chat_template=choose_chat_template(bundle.chat_template, None, embedded=False))


def _text(bundle: TokenizerBundle, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    """What `bundle.apply_chat_template` rendered (the tiny word-level vocabulary cannot decode it)."""
    seen: list[str] = []
    render = bundle.hf.apply_chat_template

    def spy(*args: Any, **kw: Any) -> Any:
        seen.append(render(*args, **{**kw, "tokenize": False}))
        return render(*args, **kw)

    bundle.hf.apply_chat_template = spy  # type: ignore[method-assign]
    try:
        ids = bundle.apply_chat_template(messages, **kwargs)
    finally:
        del bundle.hf.apply_chat_template
    assert ids == bundle.hf.encode(seen[-1], add_special_tokens=False)
    return seen[-1]


def test_tools_go_into_the_first_user_message(strict_dir: Path) -> None:
    bundle = _served(strict_dir)
    text = _text(bundle, [{"role": "user", "content": "hi"}], tools=TOOLS)
    assert text.count("[INST]") == 1 and "get_weather" in text and GENERIC_INSTRUCTION.split(":")[0] in text
    assert text.index("get_weather") < text.index("hi [/INST]")
    # a system message (which this template refuses) goes there too, first
    history = [
        {"role": "system", "content": "cat"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "world"},
    ]
    text = _text(bundle, history, tools=TOOLS)
    assert text.count("[INST]") == 2 and text.index("cat") < text.index("get_weather") < text.index(
        "hi [/INST]"
    )
    assert "world [/INST]" in text


def test_without_tools_the_template_s_refusal_is_a_kvspill_error(strict_dir: Path) -> None:
    bundle = _served(strict_dir)
    with pytest.raises(ChatTemplateError, match="Conversation roles must alternate") as e:
        bundle.apply_chat_template([{"role": "system", "content": "cat"}, {"role": "user", "content": "hi"}])
    # what the CLI prints as one line, and what the server's (TemplateError, ValueError) answers as a 400
    assert isinstance(e.value, KvspillError) and isinstance(e.value, ValueError)
    assert isinstance(e.value, InvalidParameterError) and e.value.param == "messages"
    assert str(e.value) == "Conversation roles must alternate user/assistant/user/assistant/..."


def test_a_template_that_does_not_compile(strict_dir: Path) -> None:
    bundle = replace(_served(strict_dir), chat_template="{% for m in messages %}{{ m.content }}")
    with pytest.raises(ChatTemplateError, match="does not compile"):
        bundle.apply_chat_template([{"role": "user", "content": "hi"}])


def test_llm_chat_with_tools_on_the_strict_template(strict_dir: Path) -> None:
    from kvspill.llm import LLM
    from kvspill.sampling_params import SamplingParams

    llm = LLM(str(strict_dir), device="cpu", dtype="float32", max_model_len=256)
    out = llm.chat([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=2), tools=TOOLS)
    assert out[0].num_output_tokens >= 1
