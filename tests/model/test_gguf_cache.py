"""The per-file cache of a GGUF's HF config and tokenizer (kvspill/gguf/cache.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import gguf
import pytest
import transformers
from tiny_gguf import write_tiny_gguf

from kvspill.env import env_settings
from kvspill.gguf import cache as gguf_cache

TEXTS = [
    "Hello world!",
    " leading space, 123 numbers\tand\ttabs\n",
    "ünïcödé ✓ 漢字",
    "<|im_start|>user\nHi<|im_end|>",
]


@pytest.fixture
def gguf_copy(tmp_path, smollm2_gguf_path) -> Path:
    """A link to the embedded file (its own cache key, nothing copied)."""
    link = tmp_path / "model" / "smol.gguf"
    link.parent.mkdir()
    link.symlink_to(smollm2_gguf_path)
    return link


@pytest.fixture
def tiny_gguf(tmp_path) -> Path:
    """A 32-token byte-level BPE vocabulary with merges, special tokens and a chat template."""
    path = tmp_path / "tiny" / "tiny.gguf"
    path.parent.mkdir()

    def add_tokenizer(w: gguf.GGUFWriter) -> int:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("smollm")
        tokens = [
            "<|endoftext|>",
            "<|im_start|>",
            "<|im_end|>",
            *"abcdefghijklmnopqrstuvwxyz",
            "Ġ",
            "ab",
            "Ġa",
        ]
        w.add_token_list(tokens)
        w.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3))
        w.add_token_merges(["a b", "Ġ a"])
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}")
        return len(tokens)

    return write_tiny_gguf(path, add_tokenizer=add_tokenizer)


TOOL_USE = "{% for t in tools %}<|im_start|>{{ t['function']['name'] }}<|im_end|>{% endfor %}"


@pytest.fixture
def named_templates_gguf(tiny_gguf) -> Path:
    """tiny_gguf's tokenizer with a default and a tool_use template, as llama.cpp's converter
    writes a model's named ones (`tokenizer.chat_template.tool_use`, `tokenizer.chat_templates`)."""
    base = tiny_gguf.parent.parent / "named" / "named.gguf"
    reader = gguf.GGUFReader(tiny_gguf)

    def add_tokenizer(w: gguf.GGUFWriter) -> int:
        tokens = [str(t) for t in reader.get_field("tokenizer.ggml.tokens").contents()]
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("smollm")
        w.add_token_list(tokens)
        w.add_token_types(list(reader.get_field("tokenizer.ggml.token_type").contents()))
        w.add_token_merges(["a b", "Ġ a"])
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        default = str(reader.get_field("tokenizer.chat_template").contents())
        w.add_chat_template(
            [{"name": "default", "template": default}, {"name": "tool_use", "template": TOOL_USE}]
        )
        return len(tokens)

    return write_tiny_gguf(base, add_tokenizer=add_tokenizer)


def test_named_chat_templates_of_a_gguf_file(cache_dir, tiny_gguf, named_templates_gguf) -> None:
    from kvspill.model.resolve import resolve_model
    from kvspill.text.tokenizer import load_tokenizer

    default = gguf_cache.gguf_tokenizer(tiny_gguf).chat_template
    tokenizer = gguf_cache.gguf_tokenizer(named_templates_gguf)
    assert tokenizer.chat_template == {"default": default, "tool_use": TOOL_USE}
    assert gguf_cache.gguf_tokenizer(named_templates_gguf).chat_template == tokenizer.chat_template  # cached
    bundle = load_tokenizer(resolve_model(str(named_templates_gguf)))
    messages = [{"role": "user", "content": "ab"}]
    tools = [{"type": "function", "function": {"name": "ba", "parameters": {"type": "object"}}}]
    plain = bundle.apply_chat_template(messages)
    assert bundle.apply_chat_template(messages, tools=tools) != plain
    assert tokenizer.decode(bundle.apply_chat_template(messages, tools=tools)) == "<|im_start|>ba<|im_end|>"


@pytest.fixture
def conversions(monkeypatch) -> list[str]:
    """What transformers was asked to convert from a .gguf file (one entry per conversion)."""
    seen: list[str] = []
    for cls, name in ((transformers.AutoConfig, "config"), (transformers.AutoTokenizer, "tokenizer")):
        original = cls.from_pretrained.__func__  # type: ignore[attr-defined]

        def counting(klass, *args, _name=name, _original=original, **kwargs):
            if kwargs.get("gguf_file"):
                seen.append(_name)
            return _original(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(counting))
    return seen


def _same_tokenizer(a, b) -> None:
    assert type(a) is type(b)
    assert a.get_vocab() == b.get_vocab() and len(a) == len(b)
    assert a.special_tokens_map == b.special_tokens_map
    assert (a.bos_token_id, a.eos_token_id, a.pad_token_id) == (
        b.bos_token_id,
        b.eos_token_id,
        b.pad_token_id,
    )
    assert a.chat_template == b.chat_template and a.model_max_length == b.model_max_length
    for text in TEXTS:
        for special in (True, False):
            assert a.encode(text, add_special_tokens=special) == b.encode(text, add_special_tokens=special)
    ids = a.encode(TEXTS[2] + TEXTS[3])
    assert a.decode(ids) == b.decode(ids)
    messages = [{"role": "user", "content": "Hi"}]
    assert a.apply_chat_template(messages, add_generation_prompt=True) == b.apply_chat_template(
        messages, add_generation_prompt=True
    )


@pytest.mark.slow
def test_the_second_load_reads_the_cache_and_gives_the_same_config_and_tokenizer(
    cache_dir, gguf_copy, conversions
) -> None:
    first_config = gguf_cache.gguf_hf_config(gguf_copy)
    first_tokenizer = gguf_cache.gguf_tokenizer(gguf_copy)
    assert conversions == ["config", "tokenizer"]
    entry = gguf_cache.cache_entry(gguf_copy)
    assert entry is not None and entry.is_relative_to(cache_dir)
    assert (entry / "config" / "config.json").is_file() and (entry / "tokenizer" / "tokenizer.json").is_file()

    config = gguf_cache.gguf_hf_config(gguf_copy)
    tokenizer = gguf_cache.gguf_tokenizer(gguf_copy)
    assert conversions == ["config", "tokenizer"]  # nothing converted again
    assert config.to_dict() == first_config.to_dict()
    _same_tokenizer(tokenizer, first_tokenizer)


def test_a_corrupt_or_stale_entry_is_rebuilt(cache_dir, tiny_gguf, conversions, caplog) -> None:
    fresh = gguf_cache.gguf_tokenizer(tiny_gguf)
    assert fresh.encode("ab a zz") == [30, 31, 29, 28, 28]  # the merges applied
    entry = gguf_cache.cache_entry(tiny_gguf)
    assert entry is not None
    (entry / "tokenizer" / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="kvspill.gguf.cache"):
        rebuilt = gguf_cache.gguf_tokenizer(tiny_gguf)
    assert "ignoring the tokenizer entry" in caplog.text
    _same_tokenizer(rebuilt, fresh)
    assert conversions == ["tokenizer", "tokenizer"]
    assert gguf_cache.gguf_tokenizer(tiny_gguf) is not None and conversions == ["tokenizer"] * 2  # repaired

    # The file changes (another mtime): a new version, the old one removed when it is written.
    config = gguf_cache.gguf_hf_config(tiny_gguf)
    with tiny_gguf.open("ab") as f:
        f.write(b"\0" * 32)  # padding after the tensor data: the same model, another size and mtime
    changed = gguf_cache.cache_entry(tiny_gguf)
    assert changed != entry
    assert gguf_cache.gguf_hf_config(tiny_gguf).to_dict() == config.to_dict()
    assert conversions[-2:] == ["config", "config"]
    assert not entry.exists() and changed is not None and changed.is_dir()


def test_off_means_no_cache(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("KVSPILL_GGUF_CACHE", "off")
    env_settings.cache_clear()
    try:
        assert gguf_cache.cache_entry(tmp_path / "x.gguf") is None
    finally:
        env_settings.cache_clear()


def test_an_unwritable_cache_is_logged_and_the_load_goes_on(monkeypatch, tmp_path, caplog) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("KVSPILL_GGUF_CACHE", str(blocker / "cache"))
    env_settings.cache_clear()
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")

    class Saved:
        def save_pretrained(self, where: str) -> None:
            Path(where, "x.json").write_text("{}")

    try:
        with caplog.at_level(logging.WARNING, logger="kvspill.gguf.cache"):
            value = gguf_cache._cached(model, "config", Saved, lambda d: pytest.fail("nothing was saved"))
    finally:
        env_settings.cache_clear()
    assert isinstance(value, Saved) and "cannot write" in caplog.text
