"""A thinking model's `<think>` block as `reasoning_content` (server/reasoning.py): the parser
alone (full answers, every split of a stream), then the app in-process over a scripted engine whose
chat template thinks, driven by the openai client, streaming and not."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx
import openai
import pytest
from inprocess_app import served

from kvspill.guided.spec import GuidedSpec
from kvspill.sampling_params import SamplingParams
from kvspill.server import ServerSettings, create_app
from kvspill.server.reasoning import ReasoningStream, parser_on, prompt_opens_block, split_reasoning
from kvspill.types import RequestOutput

CASES = [
    # (output, prompt opened the block, reasoning, content)
    ("<think>\nplan a b\n</think>\n\nThe answer.", False, "\nplan a b\n", "The answer."),  # Qwen3
    ("\n<think>x</think>y", False, "x", "y"),
    ("plan a b\n</think>\n\nThe answer.", True, "plan a b\n", "The answer."),  # DeepSeek-R1
    ("The answer, no thinking.", False, None, "The answer, no thinking."),
    ("  leading space kept", False, None, "  leading space kept"),
    ("<thinking> is not the tag", False, None, "<thinking> is not the tag"),
    ("<think>cut off by max_tokens", False, "cut off by max_tokens", ""),
    ("still thinking <", True, "still thinking <", ""),
    ("<think></think>", False, "", ""),
    ("a </think> b </think> c", True, "a ", "b </think> c"),  # only the first end tag closes it
    ("", True, "", ""),
    ("", False, None, ""),
]


@pytest.mark.parametrize(("text", "opened", "reasoning", "content"), CASES)
def test_split_reasoning(text, opened, reasoning, content):
    assert split_reasoning(text, opened) == (reasoning, content)


@pytest.mark.parametrize(("text", "opened", "reasoning", "content"), CASES)
@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_any_split_of_a_stream_gives_the_same_fields(text, opened, reasoning, content, size):
    stream = ReasoningStream(opened)
    pieces = [text[i : i + size] for i in range(0, len(text), size)] or [""]
    parts = [stream.feed(p, finished=i == len(pieces) - 1) for i, p in enumerate(pieces)]
    assert "".join(r for r, _ in parts) == (reasoning or "")
    assert "".join(c for _, c in parts) == content
    assert not any("<think>" in r or "</think>" in r for r, _ in parts)


def test_parser_setting_and_the_opened_prompt():
    free = SamplingParams()
    assert parser_on("auto", "{{ '<think>\\n' }}", free) and not parser_on("auto", "{{ messages }}", free)
    assert not parser_on("auto", None, free) and not parser_on("none", "<think>", free)
    assert parser_on("deepseek_r1", "{{ messages }}", free) and parser_on("qwen3", None, free)
    # a grammar (response_format, a forced tool call) writes the answer from the first token
    assert not parser_on(
        "qwen3", "<think>", SamplingParams(guided=GuidedSpec.json_schema({"type": "object"}))
    )
    tok = FakeTokenizer("")
    assert prompt_opens_block(tok, tok.encode("<|Assistant|><think>\n"))
    assert not prompt_opens_block(tok, tok.encode("assistant\n<think>\n\n</think>\n\n"))  # thinking off
    assert not prompt_opens_block(tok, tok.encode("assistant\n"))


class FakeTokenizer:
    """Characters as token ids; a chat template that only the parser's `auto` reads."""

    fim_tokens = None
    sampling_defaults: Mapping[str, float | int] = {}

    def __init__(self, generation_prompt: str) -> None:
        self.generation_prompt = generation_prompt
        self.chat_template = "{{ messages }}<think>" + generation_prompt

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(t) for t in token_ids)

    def apply_chat_template(self, messages: Sequence[dict[str, Any]], **template_kwargs: Any) -> list[int]:
        return self.encode("user: hi\nassistant:" + self.generation_prompt)


class ThinkingEngine:
    """An engine client that answers every request with `answer`, three characters a step."""

    max_model_len = 4096
    context_shift = False
    vocab_size = 0x110000
    guided_compiler = None

    def __init__(self, tokenizer: FakeTokenizer, answer: str) -> None:
        self.tokenizer = tokenizer
        self.answer = answer
        self.live: dict[str, int] = {}

    def encode(self, prompt: str) -> list[int]:
        return self.tokenizer.encode(prompt)

    def prompt_ids(self, prompt: str | list[int], params: SamplingParams) -> list[int]:
        return self.encode(prompt) if isinstance(prompt, str) else list(prompt)

    def add_request(
        self, prompt: str | list[int], params: SamplingParams | None = None, req_id: str | None = None,
        admission: bool = False,
    ) -> str:  # fmt: skip
        assert req_id is not None
        self.live[req_id] = 0
        return req_id

    def abort_request(self, req_id: str) -> None:
        self.live.pop(req_id, None)

    def has_unfinished_requests(self) -> bool:
        return bool(self.live)

    def kv_tokens_needed(self, num_prompt_tokens: int, params: SamplingParams) -> int:
        return num_prompt_tokens + (params.max_tokens or 0)

    def kv_capacity_tokens(self) -> int:
        return 100_000

    def step(self) -> list[RequestOutput]:
        outs = []
        for req_id, sent in list(self.live.items()):
            delta = self.answer[sent : sent + 3]
            self.live[req_id] = sent + 3
            done = sent + 3 >= len(self.answer)
            outs.append(RequestOutput(
                req_id, None, [1], text=self.answer[: sent + 3], delta_text=delta,
                token_ids=[1] * (sent + 3), delta_token_ids=[1] * len(delta),
                finished=done, finish_reason="stop" if done else None,
            ))  # fmt: skip
            if done:
                del self.live[req_id]
        return outs


def _serve(engine: ThinkingEngine, settings: ServerSettings) -> Iterator[openai.OpenAI]:
    with served(create_app(lambda: engine, settings)) as url:
        deadline = time.monotonic() + 10
        while httpx.get(url + "/health").status_code != 200:  # the engine thread took the engine
            assert time.monotonic() < deadline
            time.sleep(0.02)
        yield openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=30)


R1_ANSWER = "First, 2 + 2 is 4.\n</think>\n\nThe answer is 4."
QWEN3_ANSWER = '<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def r1_client() -> Iterator[openai.OpenAI]:
    yield from _serve(ThinkingEngine(FakeTokenizer("<think>\n"), R1_ANSWER), ServerSettings("fake"))


def test_r1_reasoning_apart_from_the_answer(r1_client):
    message = r1_client.chat.completions.create(model="fake", messages=HI).choices[0].message
    assert message.content == "The answer is 4."
    assert message.model_extra["reasoning_content"] == "First, 2 + 2 is 4.\n"


def test_r1_reasoning_streams_as_its_own_deltas(r1_client):
    reasoning, content = [], []
    for chunk in r1_client.chat.completions.create(model="fake", messages=HI, stream=True):
        for choice in chunk.choices:
            delta = choice.delta.model_extra or {}
            reasoning.append(delta.get("reasoning_content") or "")
            content.append(choice.delta.content or "")
            assert "think>" not in reasoning[-1] + content[-1]
    assert ("".join(reasoning), "".join(content)) == ("First, 2 + 2 is 4.\n", "The answer is 4.")


def test_parser_none_leaves_the_block_in_content():
    engine = ThinkingEngine(FakeTokenizer("<think>\n"), R1_ANSWER)
    for client in _serve(engine, ServerSettings("fake", reasoning_parser="none")):
        message = client.chat.completions.create(model="fake", messages=HI).choices[0].message
        assert message.content == R1_ANSWER and "reasoning_content" not in (message.model_extra or {})


def test_qwen3_thinks_then_calls_a_tool():
    engine = ThinkingEngine(FakeTokenizer(""), QWEN3_ANSWER)
    engine.tokenizer.chat_template += "{{ tools }}<tool_call>"
    for client in _serve(engine, ServerSettings("fake")):
        out = client.chat.completions.create(model="fake", messages=HI, tools=[WEATHER])
        message = out.choices[0].message
        assert message.model_extra["reasoning_content"] == "\nThe user wants weather.\n"
        assert message.content is None and out.choices[0].finish_reason == "tool_calls"
        assert [c.function.name for c in message.tool_calls] == ["get_weather"]
        names, reasoning = [], ""
        stream = client.chat.completions.create(model="fake", messages=HI, tools=[WEATHER], stream=True)
        for chunk in stream:
            delta = chunk.choices[0].delta
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            names += [c.function.name for c in delta.tool_calls or [] if c.function and c.function.name]
        assert (reasoning, names) == ("\nThe user wants weather.\n", ["get_weather"])
