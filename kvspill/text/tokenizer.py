"""The tokenizer of a resolved model, with what generation needs around it.

`TokenizerBundle` carries the Hugging Face tokenizer (`hf`) plus:
- `eos_token_ids`: every id that ends generation: config.json's eos_token_id (int or list),
  generation_config.json's when present, and the tokenizer's eos token;
- `bos_token_id` / `add_bos_token`: whether `encode` prepends BOS (chat templates carry their
  own BOS in the template text, so `apply_chat_template` never adds a second one);
- `chat_template` (from tokenizer_config / chat_template.jinja, or GGUF metadata; a model's named
  templates as one: text/chat_templates.py `model_template`);
- `fim_tokens`: fill-in-the-middle token strings and ids when the vocab has them.

Loading never touches the network: the model was resolved to local files first.

A template's refusal (jinja's raise_exception: roles that do not alternate, a system message it
takes none of) and a template that does not compile are a `ChatTemplateError` (a KvspillError and a
ValueError) with the template's own message, never jinja's exception.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import PretrainedConfig, PreTrainedTokenizerBase

from kvspill.errors import ChatTemplateError, ModelNotFoundError, UnsupportedModelError
from kvspill.gguf.cache import gguf_tokenizer
from kvspill.model.resolve import ResolvedModel
from kvspill.text.chat_templates import TOOLS_IN_USER, is_generic, model_template

# (prefix, suffix, middle) spellings seen in released vocabularies, most common first.
_FIM_SPELLINGS = (
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),  # StarCoder, SmolLM
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # Qwen2.5-Coder, Qwen3
    ("<PRE>", "<SUF>", "<MID>"),  # CodeLlama
)


@dataclass(frozen=True)
class FimTokens:
    prefix: str
    suffix: str
    middle: str
    prefix_id: int
    suffix_id: int
    middle_id: int


@dataclass(frozen=True)
class TokenizerBundle:
    hf: PreTrainedTokenizerBase  # the transformers tokenizer (encode/decode, detokenizers use it)
    eos_token_ids: frozenset[int]
    bos_token_id: int | None
    add_bos_token: bool  # True when encode(text) prepends bos_token_id
    chat_template: str | None
    fim_tokens: FimTokens | None
    # the model's recommended values for what a request leaves out (text/sampling_defaults.py)
    sampling_defaults: Mapping[str, float | int] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return str(self.hf.decode(list(token_ids), skip_special_tokens=skip_special_tokens))

    def apply_chat_template(self, messages: Sequence[dict[str, Any]], **template_kwargs: Any) -> list[int]:
        """Token ids of `messages` rendered with the generation prompt unless `template_kwargs`
        says otherwise (add_generation_prompt=False, continue_final_message=True); the other
        keyword arguments are the template's variables (Qwen3's enable_thinking)."""
        if self.chat_template is None:
            raise UnsupportedModelError(
                "This model has no chat template (it is probably a base model), so it cannot take chat "
                "messages. Send a plain text prompt (completions) instead, or use an instruct model."
            )
        from jinja2 import TemplateError, TemplateSyntaxError

        kwargs = {"add_generation_prompt": True, **template_kwargs}
        try:
            return self._render(messages, kwargs)
        except TemplateSyntaxError as e:
            raise ChatTemplateError(f"the chat template does not compile: {e} (line {e.lineno})") from e
        except TemplateError as e:
            if kwargs.get("tools") and is_generic(self.chat_template):
                # The generic tools text goes into a system message, and this template takes none
                # (Mistral v0.1/v0.2): the text goes in front of the first user message instead.
                try:
                    return self._render(messages, {**kwargs, TOOLS_IN_USER: True})
                except TemplateError:
                    pass
            raise ChatTemplateError(str(e) or type(e).__name__) from e

    def _render(self, messages: Sequence[dict[str, Any]], kwargs: dict[str, Any]) -> list[int]:
        ids = self.hf.apply_chat_template(
            list(messages),
            chat_template=self.chat_template,
            tokenize=True,
            return_dict=False,
            **kwargs,
        )
        return [int(i) for i in ids]  # type: ignore[arg-type]  # list[int] with return_dict=False


def load_tokenizer(resolved: ResolvedModel, hf_config: PretrainedConfig | None = None) -> TokenizerBundle:
    """Load the tokenizer of `resolved`; `hf_config` (if already loaded) adds its eos ids."""
    tokenizer = _load_hf_tokenizer(resolved)
    eos: set[int] = set()
    if hf_config is not None:
        eos |= _as_ids(getattr(hf_config, "eos_token_id", None))
    if resolved.kind == "dir":
        eos |= _as_ids(_json_field(resolved.path / "config.json", "eos_token_id"))
        eos |= _as_ids(_json_field(resolved.path / "generation_config.json", "eos_token_id"))
    eos |= _as_ids(tokenizer.eos_token_id)
    if not eos:
        raise UnsupportedModelError(
            f"{resolved.display_name} defines no end-of-sequence token (config.json, "
            "generation_config.json or tokenizer): add eos_token_id to its config.json."
        )
    bos_id = tokenizer.bos_token_id
    add_bos = bos_id is not None and tokenizer.encode("", add_special_tokens=True)[:1] == [bos_id]
    return TokenizerBundle(
        hf=tokenizer,
        eos_token_ids=frozenset(eos),
        bos_token_id=bos_id,
        add_bos_token=add_bos,
        # several named templates (a dict): one that picks among them as transformers does
        chat_template=model_template(getattr(tokenizer, "chat_template", None)),
        fim_tokens=_find_fim_tokens(tokenizer),
    )


def _load_hf_tokenizer(resolved: ResolvedModel) -> PreTrainedTokenizerBase:
    path = resolved.path
    try:
        if resolved.kind == "gguf":
            return gguf_tokenizer(path)  # cached per file: converting the vocabulary takes seconds
        # imported here: transformers 5.17's auto classes pull in its modeling stack (gguf/cache.py)
        from transformers.models.auto.tokenization_auto import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError, KeyError, TypeError) as e:
        where = path if resolved.kind == "gguf" else path / "tokenizer.json"
        raise ModelNotFoundError(
            f"Cannot load the tokenizer of {resolved.display_name} from {str(where)!r}: {e}. "
            "A model directory needs tokenizer.json (or tokenizer.model) and tokenizer_config.json: "
            "download them with the model."
        ) from e


def _find_fim_tokens(tokenizer: PreTrainedTokenizerBase) -> FimTokens | None:
    vocab = tokenizer.get_vocab()
    for prefix, suffix, middle in _FIM_SPELLINGS:
        if prefix in vocab and suffix in vocab and middle in vocab:
            return FimTokens(prefix, suffix, middle, vocab[prefix], vocab[suffix], vocab[middle])
    return None


def _json_field(path: Path, key: str) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8")).get(key)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None


def _as_ids(value: Any) -> set[int]:
    if value is None:
        return set()
    if isinstance(value, int):
        return {value}
    return {int(v) for v in value if v is not None}
