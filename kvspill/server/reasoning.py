"""A thinking model's reasoning apart from its answer: `reasoning_content` beside `content`, as
vLLM's `--reasoning-parser deepseek_r1 | qwen3` and llama-server's `--reasoning-format deepseek`
answer it.

Models that think write `<think> ... </think>` before the answer. Qwen3 and QwQ write both tags
(Qwen3's `enable_thinking: false` puts an empty block in the prompt instead); DeepSeek-R1's
distills (Qwen2 and Llama weights) get a generation prompt that already opened the block, so their
output holds only the closing tag.

Invariants:
- The parser is on for a chat request when the server's `--reasoning-parser` is on (auto: the
  chat template mentions `<think>`) and no grammar constrains the output (a grammar, from
  response_format or a forced tool call, writes the answer from the first token).
- Opened: the prompt ends inside a block (after its last `<think>` no `</think>`), so the output
  is reasoning up to `</think>`. Otherwise the output is reasoning only if it starts (after
  whitespace) with `<think>`; else all of it is content, untouched.
- The tags reach neither field; the whitespace between `</think>` and the answer is dropped.
- An output that ends inside the block (max_tokens) is all reasoning.
- Streaming: a tail that may be the start of a tag is held until the next delta settles it; the
  last delta releases everything. A full body is the same code fed once, finished.
"""

from __future__ import annotations

import enum

from kvspill.engine.client import TokenizerClient
from kvspill.sampling_params import SamplingParams

START, END = "<think>", "</think>"
PARSERS = ("auto", "none", "deepseek_r1", "qwen3")  # vLLM's names for the same two tags
_PROMPT_TAIL_TOKENS = 32  # enough of the prompt's end to hold an opened (or closed) block's tags


def parser_on(setting: str, chat_template: str | None, params: SamplingParams) -> bool:
    """Whether `--reasoning-parser setting` parses this request to a model with this template."""
    if params.guided is not None:
        return False  # the grammar writes the answer from the first token
    if setting == "auto":
        return chat_template is not None and START in chat_template
    return setting != "none"


def prompt_opens_block(tokenizer: TokenizerClient, prompt_ids: list[int]) -> bool:
    """Whether the prompt ends inside a thinking block (DeepSeek-R1's generation prompt)."""
    tail = tokenizer.decode(prompt_ids[-_PROMPT_TAIL_TOKENS:], skip_special_tokens=False)
    start = tail.rfind(START)
    return start >= 0 and END not in tail[start:]


class _State(enum.Enum):
    BEFORE = enum.auto()  # nothing but whitespace yet: a block may still start
    REASONING = enum.auto()  # inside the block
    AFTER = enum.auto()  # past `</think>`: whitespace before the answer is dropped
    CONTENT = enum.auto()  # the answer


class ReasoningStream:
    """One choice's text deltas as (reasoning delta, content delta)."""

    def __init__(self, opened: bool) -> None:
        self.state = _State.REASONING if opened else _State.BEFORE
        self.held = ""
        self.saw_reasoning = opened

    def feed(self, delta: str, finished: bool) -> tuple[str, str]:
        text, self.held = self.held + delta, ""
        reasoning: list[str] = []
        content: list[str] = []
        while text:
            if self.state is _State.BEFORE:
                text = self._before(text, finished)
            elif self.state is _State.REASONING:
                text = self._reasoning(text, finished, reasoning)
            elif self.state is _State.AFTER:
                stripped = text.lstrip()
                if stripped:
                    self.state = _State.CONTENT
                text = stripped
            else:
                content.append(text)
                text = ""
        return "".join(reasoning), "".join(content)

    def _before(self, text: str, finished: bool) -> str:
        """The text left to read once the block has started or cannot start any more."""
        stripped = text.lstrip()
        if stripped.startswith(START):
            self.state = _State.REASONING
            self.saw_reasoning = True
            return stripped[len(START) :]
        if not finished and START.startswith(stripped):  # whitespace, or a tag still arriving
            self.held = text
            return ""
        self.state = _State.CONTENT
        return text

    def _reasoning(self, text: str, finished: bool, reasoning: list[str]) -> str:
        end = text.find(END)
        if end >= 0:
            reasoning.append(text[:end])
            self.state = _State.AFTER
            return text[end + len(END) :]
        keep = 0 if finished else _partial_tag(text, END)
        reasoning.append(text[: len(text) - keep])
        self.held = text[len(text) - keep :]
        return ""


def _partial_tag(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a proper start of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


def split_reasoning(text: str, opened: bool) -> tuple[str | None, str]:
    """(reasoning or None, content) of a finished answer."""
    stream = ReasoningStream(opened)
    reasoning, content = stream.feed(text, finished=True)
    return (reasoning if stream.saw_reasoning else None), content
