"""A model's named chat templates (tokenizer_config.json's list of {"name", "template"}: Hermes-2/3,
Command-R, Mistral tool models; transformers 5's additional_chat_templates/ folder) render as
transformers renders them: "default" for a conversation, "tool_use" when `tools` are passed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from transformers.models.auto.tokenization_auto import AutoTokenizer
from transformers.utils.chat_template_utils import render_jinja_template

from kvspill.errors import ChatTemplateError
from kvspill.model.resolve import resolve_model
from kvspill.text.chat_templates import choose_chat_template, model_template, named_template
from kvspill.text.tokenizer import load_tokenizer

DEFAULT = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + ' ' + m['content'] + '<|im_end|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant' }}{% endif %}"
)
TOOL_USE = (
    "{{ '<|im_start|>system tools' }}{% for t in tools %}{{ ' ' + t['function']['name'] }}{% endfor %}"
    "{{ '<|im_end|>' }}" + DEFAULT
)
TOOLS = [
    {"type": "function", "function": {"name": "hello", "parameters": {"type": "object", "properties": {}}}}
]
MESSAGES = [{"role": "user", "content": "hi cat"}]


def _render(template: str, tools: list[dict[str, Any]] | None) -> str:
    rendered = render_jinja_template(
        [MESSAGES], tools=tools, chat_template=template, add_generation_prompt=True
    )
    return rendered[0][0]


# Whitespace at the edges (trim_blocks / lstrip_blocks act on them) and a macro inside the switch.
EDGY = "\n  {% if tools %}T{{ tools | length }}{% endif %}  \n{% for m in messages %}{{ m.content }}{% endfor %}   "
MACRO = "  {%- macro show(x) -%}<{{ x }}>{%- endmacro -%}{{ show(messages[0].content) }}\n{% if true %}\n  x{% endif %}\n"


@pytest.mark.parametrize(("default", "tool_use"), [(DEFAULT, TOOL_USE), (EDGY, MACRO), (MACRO, EDGY)])
def test_the_switch_renders_each_template_as_it_renders_alone(default: str, tool_use: str) -> None:
    both = named_template({"default": default, "tool_use": tool_use})
    assert both is not None
    assert _render(both, None) == _render(default, None)
    assert _render(both, TOOLS) == _render(tool_use, TOOLS)
    assert _render(both, []) == _render(tool_use, [])  # transformers: tools is not None


def test_named_forms_and_no_default() -> None:
    assert model_template(DEFAULT) == DEFAULT
    assert model_template(None) is None and model_template({}) is None
    assert model_template([{"name": "default", "template": DEFAULT}]) == DEFAULT
    assert model_template({"default": DEFAULT}) == DEFAULT
    only_tools = model_template({"tool_use": TOOL_USE, "rag": DEFAULT})
    assert only_tools is not None and _render(only_tools, TOOLS) == _render(TOOL_USE, TOOLS)
    with pytest.raises(Exception, match="none named 'default'"):
        _render(only_tools, None)


def _named_list_dir(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    (dst / "chat_template.jinja").unlink()
    config = json.loads((dst / "tokenizer_config.json").read_text())
    config["chat_template"] = [
        {"name": "default", "template": DEFAULT},
        {"name": "tool_use", "template": TOOL_USE},
    ]
    (dst / "tokenizer_config.json").write_text(json.dumps(config))
    return dst


def _additional_templates_dir(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    (dst / "chat_template.jinja").write_text(DEFAULT)
    (dst / "additional_chat_templates").mkdir()
    (dst / "additional_chat_templates" / "tool_use.jinja").write_text(TOOL_USE)
    return dst


@pytest.mark.parametrize("layout", [_named_list_dir, _additional_templates_dir])
def test_the_bundle_renders_what_transformers_renders(
    tmp_path: Path, tiny_llama_dir: Path, layout: Any
) -> None:
    model = layout(tiny_llama_dir, tmp_path / "m")
    hf = AutoTokenizer.from_pretrained(str(model))
    assert isinstance(hf.chat_template, dict)  # transformers' form of several templates
    bundle = load_tokenizer(resolve_model(str(model)))
    assert bundle.chat_template is not None
    for tools in (None, TOOLS):
        want = hf.apply_chat_template(MESSAGES, tools=tools, add_generation_prompt=True, return_dict=False)
        assert bundle.apply_chat_template(MESSAGES, **({"tools": tools} if tools else {})) == list(want)
    # the engine keeps it as it is (it takes tools), and --chat-template still wins
    assert choose_chat_template(bundle.chat_template, None, embedded=False) == bundle.chat_template
    assert choose_chat_template(bundle.chat_template, "{{ tools }}", embedded=False) == "{{ tools }}"


def test_no_default_is_a_clear_error(tmp_path: Path, tiny_llama_dir: Path) -> None:
    model = _named_list_dir(tiny_llama_dir, tmp_path / "m")
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["chat_template"] = [
        {"name": "rag", "template": DEFAULT},
        {"name": "tool_use", "template": TOOL_USE},
    ]
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    bundle = load_tokenizer(resolve_model(str(model)))
    with pytest.raises(
        ChatTemplateError, match=r"several chat templates \('rag', 'tool_use'\) and none named 'default'"
    ):
        bundle.apply_chat_template(MESSAGES)
    assert bundle.apply_chat_template(MESSAGES, tools=TOOLS)  # tool_use serves a request with tools


def test_llm_chat_on_a_named_list_model(tmp_path: Path, tiny_llama_dir: Path) -> None:
    from kvspill.llm import LLM
    from kvspill.sampling_params import SamplingParams

    model = _named_list_dir(tiny_llama_dir, tmp_path / "m")
    llm = LLM(str(model), device="cpu", dtype="float32", max_model_len=64)
    hf = AutoTokenizer.from_pretrained(str(model))
    want = hf.apply_chat_template(MESSAGES, add_generation_prompt=True, return_dict=False)
    assert llm.chat_prompt(MESSAGES) == list(want)
    out = llm.chat(MESSAGES, SamplingParams(max_tokens=2, temperature=0), tools=TOOLS)
    assert out[0].num_output_tokens >= 1
