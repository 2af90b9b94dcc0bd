"""OpenAI-compatible request models (pydantic v2) and their mapping to `SamplingParams`.

Invariants:
- Wrong types fail pydantic validation (the app turns that into a 400 invalid_request_error).
- An unknown field is an `InvalidParameterError` naming it (`structured.py`), and so is a known
  field with an unsupported value (best_of>1, echo with stream): never silently ignored.
- `echo` (with `logprobs`: the prompt's token logprobs) and `max_tokens=0` with echo: `echo.py`.
- Output constraints (`response_format`, the `guided_*` extras, `grammar`), `logit_bias` and
  tools come from `structured.py` and `tools.py`.
- The fields carry the ranges `SamplingParams` accepts, so the OpenAPI document (and a schema
  fuzzer) knows them and an out-of-range value is a pydantic 400 naming the field; `SamplingParams`
  validates again (and its `InvalidParameterError` names the param too).
- `prompt` may be a batch (a list of strings or of token-id lists): one choice per prompt and
  sample, index = prompt_index * n + sample_index.
- A sampling field the request leaves out takes the model's recommended value where the server
  has one (`sampling_params(defaults)`: text/sampling_defaults.py), else SamplingParams' default.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kvspill.errors import InvalidParameterError
from kvspill.guided.bounded_json import check_json_depth, loads_bounded
from kvspill.sampling_params import MAX_BAD_WORDS, SamplingParams
from kvspill.server.echo import echo_sampling_params
from kvspill.server.structured import StructuredFields
from kvspill.server.tools import Tool, ToolChoice

MAX_N = 128  # OpenAI's own bound on `n`
MAX_STOP_TOKEN_IDS = 1024  # a bound on a list every step of the request looks through
MAX_ALLOWED_TOKEN_IDS = 1 << 20  # more than any vocabulary: a bound on the body, not a policy
_NO_DEFAULTS: Mapping[str, float | int] = MappingProxyType({})


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = Field(False, strict=True)
    continuous_usage_stats: bool = Field(False, strict=True)  # vLLM's: every chunk carries the usage so far


class _Sampling(StructuredFields):
    model_config = ConfigDict(extra="allow")  # kept to be refused by name (reject_unknown_fields)

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1, strict=True)
    temperature: float | None = Field(None, ge=0, le=100)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1, strict=True)
    min_p: float | None = Field(None, ge=0, le=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-(2**63), lt=2**64, strict=True)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    repetition_penalty: float | None = Field(None, gt=0, le=10)
    min_tokens: int | None = Field(None, ge=0, strict=True)
    ignore_eos: bool | None = Field(None, strict=True)
    # vLLM's extras, with its SamplingParams' meaning: token ids that end the output (as eos
    # does), the matched stop string kept in the text, special tokens kept in the text
    stop_token_ids: list[int] | None = Field(None, max_length=MAX_STOP_TOKEN_IDS)
    include_stop_str_in_output: bool | None = Field(None, strict=True)
    skip_special_tokens: bool | None = Field(None, strict=True)
    # vLLM's token extras: only these ids may be sampled; words the output must not contain;
    # keep the prompt's last k tokens (-1: as many as fit); the prompt tokens' logprobs
    allowed_token_ids: list[int] | None = Field(None, min_length=1, max_length=MAX_ALLOWED_TOKEN_IDS)
    bad_words: list[str] | None = Field(None, max_length=MAX_BAD_WORDS)
    truncate_prompt_tokens: int | None = Field(None, ge=-1, strict=True)
    prompt_logprobs: int | None = Field(None, ge=0, le=20, strict=True)
    # kvspill's extra: go on past a full context by dropping its middle (--context-shift's default)
    context_shift: bool | None = Field(None, strict=True)
    # kvspill's extras: this request's window on the gpu tier, at most the server's flags (a
    # larger value is a 400 from the engine, which knows them: scheduler/request_window.py)
    hot_window_tokens: int | None = Field(None, ge=0, strict=True)
    num_sink_blocks: int | None = Field(None, ge=0, strict=True)
    n: int | None = Field(1, ge=1, le=MAX_N, strict=True)
    stream: bool = Field(False, strict=True)
    stream_options: StreamOptions | None = None
    user: str | None = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)

    @property
    def continuous_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.continuous_usage_stats)

    def check_stream_options(self) -> None:
        """OpenAI's and vLLM's rule: stream_options only with stream."""
        if self.stream_options is not None and not self.stream:
            raise InvalidParameterError(
                "stream_options", "stream_options is only allowed with stream: true (or leave it out)"
            )
        if self.prompt_logprobs is not None and self.stream:
            raise InvalidParameterError(
                "prompt_logprobs", "prompt_logprobs is not available with stream=true: send stream=false"
            )

    @property
    def num_samples(self) -> int:
        return self.n or 1

    def _params(
        self,
        max_tokens: int | None,
        logprobs: int | None,
        defaults: Mapping[str, float | int] = _NO_DEFAULTS,
    ) -> SamplingParams:
        """The request's values over `defaults` (the model's recommended sampling values)."""
        self.check_stream_options()
        opts: dict[str, Any] = {**defaults, "max_tokens": max_tokens, "logprobs": logprobs}
        for name in (
            "temperature",
            "top_p",
            "top_k",
            "min_p",
            "seed",
            "presence_penalty",
            "frequency_penalty",
            "repetition_penalty",
            "min_tokens",
            "ignore_eos",
            "include_stop_str_in_output",
            "skip_special_tokens",
            "context_shift",
            "hot_window_tokens",
            "num_sink_blocks",
            "truncate_prompt_tokens",
            "prompt_logprobs",
        ):
            value = getattr(self, name)
            if value is not None:
                opts[name] = value
        if self.stop is not None:
            opts["stop"] = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        if self.stop_token_ids is not None:
            opts["stop_token_ids"] = tuple(self.stop_token_ids)
        if self.allowed_token_ids is not None:
            opts["allowed_token_ids"] = tuple(self.allowed_token_ids)
        if self.bad_words is not None:
            opts["bad_words"] = tuple(self.bad_words)
        return SamplingParams(**opts, **self.constraint_options())


class CompletionRequest(_Sampling):
    prompt: str | list[int] | list[str] | list[list[int]]
    suffix: str | None = None
    max_tokens: int | None = Field(16, ge=0, strict=True)  # 0: only with echo (score the prompt)
    logprobs: int | None = Field(None, ge=0, le=20)  # lax: some clients send true (1)
    echo: bool = Field(False, strict=True)
    best_of: int | None = Field(None, strict=True)

    def prompts(self) -> list[str | list[int]]:
        """The prompts of the request: a string or a token-id list is one; a list of them is a batch."""
        p = self.prompt
        if isinstance(p, list) and p and isinstance(p[0], (str, list)):
            return list(p)
        return [p]  # type: ignore[list-item]  # a str or one token-id list (mypy cannot narrow by p[0])

    def sampling_params(self, defaults: Mapping[str, float | int] = _NO_DEFAULTS) -> SamplingParams:
        if self.best_of not in (None, 1):
            raise InvalidParameterError("best_of", f"best_of={self.best_of} is not supported")
        # max_tokens=0 (echo only) runs one token that the answer leaves out (echo.py)
        max_tokens = 1 if self.max_tokens == 0 else self.max_tokens
        return echo_sampling_params(
            self._params(max_tokens, self.logprobs, defaults),
            echo=self.echo,
            max_tokens=self.max_tokens,
            stream=self.stream,
            suffix=self.suffix,
        )


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[dict[str, Any]] | None = None  # an assistant's earlier calls (OpenAI shape)
    tool_call_id: str | None = None  # a tool message: the call it answers
    name: str | None = None

    def as_template_dict(self) -> dict[str, Any]:
        content = self.content
        if isinstance(content, list):
            if any(part.type != "text" for part in content):
                raise InvalidParameterError("messages", "only text content parts are supported")
            content = "".join(part.text or "" for part in content)
        out: dict[str, Any] = {"role": self.role, "content": content or ""}
        if self.tool_calls:
            out["tool_calls"] = [_template_tool_call(c) for c in self.tool_calls]
        for key in ("tool_call_id", "name"):
            if (value := getattr(self, key)) is not None:
                out[key] = value
        return out


def _template_tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI tool call as chat templates read it: arguments as an object (HF convention),
    bounded in depth (the template serializes them again, recursively)."""
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise InvalidParameterError("messages", "a tool call needs function.name")
    args = function.get("arguments", "{}")
    if isinstance(args, str):
        args = loads_bounded(args, "messages", "tool call's arguments object")
    else:
        check_json_depth(args, "messages", "tool call's arguments object")
    return {**call, "type": "function", "function": {"name": function["name"], "arguments": args}}


# apply_chat_template's own arguments and what the request's other fields set: not template variables
_RESERVED_TEMPLATE_KWARGS = frozenset(
    {
        "conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
        "continue_final_message", "tokenize", "padding", "truncation", "max_length", "return_tensors",
        "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs",
    }
)  # fmt: skip


class ChatTemplateFields(BaseModel):
    """vLLM's extras for rendering the messages: the generation prompt, continuing the final
    (assistant) message, and variables for the template (Qwen3's `enable_thinking`)."""

    add_generation_prompt: bool = Field(True, strict=True)
    continue_final_message: bool = Field(False, strict=True)
    chat_template_kwargs: dict[str, Any] | None = None

    def template_kwargs(self, messages: list[ChatMessage]) -> dict[str, Any]:
        """apply_chat_template's keyword arguments for these fields (raises for a bad combination)."""
        if self.continue_final_message:
            if self.add_generation_prompt:
                raise InvalidParameterError(
                    "continue_final_message",
                    "continue_final_message cannot be combined with add_generation_prompt: "
                    "send add_generation_prompt=false to continue the last message",
                )
            if messages[-1].role != "assistant":
                raise InvalidParameterError(
                    "continue_final_message",
                    f"continue_final_message continues the last message, which must be the assistant's "
                    f"(it is the {messages[-1].role}'s)",
                )
        extra = self.chat_template_kwargs or {}
        clash = sorted(set(extra) & _RESERVED_TEMPLATE_KWARGS)
        if clash:
            raise InvalidParameterError(
                "chat_template_kwargs",
                f"chat_template_kwargs may not set `{clash[0]}`: it is the request's own field or "
                "the server's to set",
            )
        check_json_depth(extra, "chat_template_kwargs", "chat_template_kwargs object")
        return {
            **extra,
            "add_generation_prompt": self.add_generation_prompt,
            "continue_final_message": self.continue_final_message,
        }


class ChatCompletionRequest(_Sampling, ChatTemplateFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, strict=True)
    logprobs: bool = Field(False, strict=True)
    top_logprobs: int | None = Field(None, ge=0, le=20, strict=True)
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = Field(None, strict=True)
    echo: bool = Field(
        False, strict=True
    )  # vLLM's: the answer starts with the last message if it is the assistant's

    def echoed_text(self) -> str | None:
        """What vLLM's `echo` puts in front of the answer: the last message's text when it is the
        assistant's (an answer being continued), else nothing."""
        last = self.messages[-1]
        if not self.echo or last.role != "assistant":
            return None
        return str(last.as_template_dict()["content"])

    def sampling_params(self, defaults: Mapping[str, float | int] = _NO_DEFAULTS) -> SamplingParams:
        max_tokens = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        if self.top_logprobs is not None and not self.logprobs:
            raise InvalidParameterError("top_logprobs", "top_logprobs needs logprobs=true")
        logprobs = (self.top_logprobs or 0) if self.logprobs else None
        return self._params(max_tokens, logprobs, defaults)


class TokenizeRequest(ChatTemplateFields):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = Field(None, min_length=1)
    add_special_tokens: bool = Field(True, strict=True)


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    tokens: list[int]
