"""OpenAI response shapes: full bodies, stream chunks, usage and logprobs of one `Job`.

Invariants:
- Every body and chunk of a job carries the job's `id` and `created`.
- Choice `index` = prompt_index * n + sample_index (OpenAI's and vLLM's order).
- Usage counts each prompt's tokens once (not once per sample) and every choice's output tokens.
- Logprobs are sent once: each choice remembers how many it has sent and its text offset.
- Every logprob is a finite float (-inf and NaN become MIN_LOGPROB): JSON has no infinities, and
  a penalty that pushes a token's probability to 0 must not turn the answer into a 500.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from kvspill.sampling_params import SamplingParams
from kvspill.server.echo import Echo, join_legacy, legacy_prompt_logprobs
from kvspill.server.echo import finite as _finite
from kvspill.server.prompt_logprobs import vllm_prompt_logprobs
from kvspill.server.reasoning import ReasoningStream, split_reasoning
from kvspill.server.tools import ToolDeltaStream, ToolPlan, answer_message
from kvspill.server.tools import finish_reason as finish_reason_with_tools
from kvspill.types import RequestOutput


@dataclass
class Choice:
    """One engine request of a job: where its answer goes and what of it was sent."""

    index: int
    prompt_index: int
    params: SamplingParams
    final: RequestOutput | None = None
    sent_logprobs: int = 0
    text_offset: int = 0
    tool_stream: ToolDeltaStream | None = None  # a streamed chat choice with tools
    reasoning: ReasoningStream | None = None  # a streamed chat choice of a thinking model


@dataclass
class Job:
    """What one HTTP request asks of the engine (`prompts` x `n` choices), and how to answer."""

    chat: bool
    model: str
    prompts: list[str | list[int]]
    params: SamplingParams
    stream: bool
    include_usage: bool
    tokenizer: Any  # TokenizerBundle or None
    n: int = 1
    tools: ToolPlan | None = None  # a chat request with tools (tools.py)
    echo: Echo | None = None  # a completions request with echo=true (echo.py)
    # A chat request whose reasoning is parsed (reasoning.py): whether the prompt opened the block
    reasoning_opened: bool | None = None
    continuous_usage: bool = False  # vLLM's stream_options.continuous_usage_stats
    prompt_logprobs: int | None = None  # vLLM's: the prompt tokens' logprobs, k top tokens each
    chat_echo: str | None = None  # vLLM's chat `echo`: the continued assistant message, before the answer
    choices: list[Choice] = field(init=False)

    def __post_init__(self) -> None:
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.choices = [
            Choice(i * self.n + j, i, _sample_params(self.params, j, self.n))
            for i in range(len(self.prompts))
            for j in range(self.n)
        ]
        for c in self.choices:
            if self.tools is not None:
                c.tool_stream = ToolDeltaStream(self.tools)
            if self.reasoning_opened is not None:
                c.reasoning = ReasoningStream(self.reasoning_opened)

    def usage(self) -> dict[str, Any]:
        """OpenAI's usage; `prompt_tokens_details.cached_tokens`: prompt tokens found in the prefix
        cache (any tier or the persist dir), once per prompt as prompt_tokens counts them."""
        finals = [(c.prompt_index, c.final) for c in self.choices if c.final is not None]
        prompt_tokens = {i: final.num_prompt_tokens for i, final in finals}
        cached_tokens = {i: final.num_cached_tokens for i, final in finals}
        completion = sum(final.num_output_tokens for _, final in finals)
        if self.echo is not None and self.echo.score_only:
            completion = 0  # the one token the engine ran is not part of the answer
        total_prompt = sum(prompt_tokens.values())
        return {
            "prompt_tokens": total_prompt,
            "completion_tokens": completion,
            "total_tokens": total_prompt + completion,
            "prompt_tokens_details": {"cached_tokens": sum(cached_tokens.values())},
        }


def _sample_params(params: SamplingParams, j: int, n: int) -> SamplingParams:
    """Sample j of n: with a seed, seed + j, so the n samples differ yet replay (as vLLM does)."""
    if n == 1 or params.seed is None:
        return params
    return replace(params, seed=(params.seed + j) % 2**64)


def sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def _base(job: Job, obj: str) -> dict[str, Any]:
    return {"id": job.id, "object": obj, "created": job.created, "model": job.model}


def role_chunks(job: Job) -> list[str]:
    """The first chat chunks: `role: assistant`, one per choice."""
    body = _base(job, "chat.completion.chunk")
    body["choices"] = [
        {
            "index": c.index,
            "delta": {"role": "assistant", "content": job.chat_echo or ""},
            "logprobs": None,
            "finish_reason": None,
        }
        for c in job.choices
    ]
    return [sse(body)]


def chunk(job: Job, choice: Choice, out: RequestOutput) -> str | None:
    """The stream chunk for one output of one choice, or None when it adds nothing."""
    logprobs = _logprobs(job, choice, out)
    ids_only = job.tokenizer is None  # no text to stream: the token ids are the content
    if not (out.delta_text or out.finished or logprobs is not None or (ids_only and out.delta_token_ids)):
        return None
    finish_reason = out.finish_reason if out.finished else None
    if job.chat:
        delta = _chat_delta(choice, out, logprobs is not None)
        if delta is None:
            return None
        if choice.tool_stream is not None:
            finish_reason = finish_reason_with_tools(finish_reason, choice.tool_stream.num_calls > 0)
        body = _base(job, "chat.completion.chunk")
        body["choices"] = [
            {
                "index": choice.index,
                "delta": delta,
                "logprobs": logprobs,
                "finish_reason": finish_reason,
            }
        ]
    else:
        body = _base(job, "text_completion")
        body["choices"] = [
            {
                "index": choice.index,
                "text": out.delta_text,
                "logprobs": logprobs,
                "finish_reason": finish_reason,
            }
        ]
        if ids_only:
            body["choices"][0]["token_ids"] = list(out.delta_token_ids)
    if job.continuous_usage:
        completion = out.num_output_tokens
        body["usage"] = {
            "prompt_tokens": out.num_prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": out.num_prompt_tokens + completion,
        }  # this choice's, so far (vLLM's)
    return sse(body)


def _chat_delta(choice: Choice, out: RequestOutput, has_logprobs: bool) -> dict[str, Any] | None:
    """A chat chunk's `delta` (reasoning, content, tool calls), or None when it would be empty."""
    reasoning, content = "", out.delta_text
    if choice.reasoning is not None:
        reasoning, content = choice.reasoning.feed(content, out.finished)
    delta: dict[str, Any] = {"reasoning_content": reasoning} if reasoning else {}
    calls: list[dict[str, Any]] = []
    if choice.tool_stream is not None:
        content, calls = choice.tool_stream.feed(content, out.finished)
    if calls:
        delta.update(content=content or None, tool_calls=calls)
    elif content or not reasoning:
        delta["content"] = content
    if not (reasoning or content or calls or out.finished or has_logprobs):
        return None
    return delta


def usage_chunk(job: Job) -> str:
    body = _base(job, "chat.completion.chunk" if job.chat else "text_completion")
    body["choices"] = []
    body["usage"] = job.usage()
    return sse(body)


def full_body(job: Job) -> dict[str, Any]:
    """The non-streaming body; every choice has its `final` output."""
    body = _base(job, "chat.completion" if job.chat else "text_completion")
    choices = []
    for c in job.choices:
        assert c.final is not None
        logprobs = _logprobs(job, c, c.final)
        if job.chat:
            message, reason = _chat_message(job, c.final)
            if job.chat_echo:
                message["content"] = job.chat_echo + (message["content"] or "")
            choices.append(
                {"index": c.index, "message": message, "logprobs": logprobs, "finish_reason": reason}
            )
        else:
            text = c.final.text
            if job.echo is not None:
                text, logprobs = _echoed(job, job.echo, c, logprobs)
            choices.append(
                {"index": c.index, "text": text, "logprobs": logprobs, "finish_reason": c.final.finish_reason}
            )
            if job.tokenizer is None:
                choices[-1]["token_ids"] = list(c.final.token_ids)
    body["choices"] = choices
    if job.prompt_logprobs is not None:
        lists = [_prompt_logprobs(job, c.final) for c in job.choices if c.final is not None]
        if job.chat:
            body["prompt_logprobs"] = lists[0]  # one prompt per chat request
        else:
            for entry, lps in zip(choices, lists, strict=True):
                entry["prompt_logprobs"] = lps
    body["usage"] = job.usage()
    return body


def _prompt_logprobs(job: Job, final: RequestOutput) -> list[dict[str, dict[str, Any]] | None]:
    assert final.prompt_logprobs is not None and job.prompt_logprobs is not None
    return vllm_prompt_logprobs(final.prompt_logprobs, job.prompt_logprobs, lambda t: _tok(job, t))


def _chat_message(job: Job, final: RequestOutput) -> tuple[dict[str, Any], str | None]:
    """A finished chat choice's `message` (content, reasoning, tool calls) and finish reason."""
    reasoning, content = None, final.text
    if job.reasoning_opened is not None:
        reasoning, content = split_reasoning(final.text, job.reasoning_opened)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    reason = final.finish_reason
    if job.tools is not None:
        parsed, calls = answer_message(job.tools, content)
        message.update(content=parsed, tool_calls=[t.as_openai() for t in calls])
        reason = finish_reason_with_tools(reason, bool(calls))
    if job.reasoning_opened is not None:
        if reasoning is not None and not message["content"]:
            message["content"] = None  # vLLM's: all of it was thinking
        message["reasoning_content"] = reasoning
    return message, reason


def _echoed(
    job: Job, echo: Echo, choice: Choice, generated: dict[str, Any] | None
) -> tuple[str, dict[str, Any] | None]:
    """A completion choice's text and logprobs with its prompt in front (echo.py)."""
    out = choice.final
    assert out is not None
    prompt_text = echo.texts[choice.prompt_index]
    if job.params.truncate_prompt_tokens is not None:  # the prompt the model read: its kept tokens
        prompt_text = job.tokenizer.hf.decode(out.prompt_token_ids, skip_special_tokens=False)
    text = prompt_text if echo.score_only else prompt_text + out.text
    if job.params.logprobs is None:
        return text, None
    assert out.prompt_logprobs is not None, (
        "an echo request with logprobs asks the engine for prompt_logprobs"
    )
    prompt_part = legacy_prompt_logprobs(
        out.prompt_logprobs, out.prompt_token_ids, job.params.logprobs, lambda t: _tok(job, t)
    )
    if echo.score_only or generated is None:
        return text, prompt_part
    shift = len(prompt_text)  # generated offsets count from the end of the echoed prompt
    generated = {**generated, "text_offset": [o + shift for o in generated["text_offset"]]}
    return text, join_legacy(prompt_part, generated)


def _tok(job: Job, token_id: int) -> str:
    if job.tokenizer is None:
        return f"<{token_id}>"
    return str(job.tokenizer.hf.decode([token_id]))


def _logprobs(job: Job, choice: Choice, out: RequestOutput) -> dict[str, Any] | None:
    """Logprobs of the choice's tokens not yet sent (all of them for a full body)."""
    if job.params.logprobs is None:
        return None
    new = out.logprobs[choice.sent_logprobs :]
    choice.sent_logprobs = len(out.logprobs)
    if not new and not out.finished:
        return None
    if job.chat:
        content = []
        for lp in new:
            token = _tok(job, lp.token_id)
            top = [
                {"token": (t := _tok(job, tid)), "logprob": _finite(v), "bytes": list(t.encode())}
                for tid, v in lp.top
            ]
            content.append(
                {
                    "token": token,
                    "logprob": _finite(lp.logprob),
                    "bytes": list(token.encode()),
                    "top_logprobs": top,
                }
            )
        return {"content": content, "refusal": None}
    tokens, token_lps, tops, offsets = [], [], [], []
    for lp in new:
        token = _tok(job, lp.token_id)
        tokens.append(token)
        token_lps.append(_finite(lp.logprob))
        tops.append({_tok(job, tid): _finite(v) for tid, v in lp.top} if job.params.logprobs else None)
        offsets.append(choice.text_offset)
        choice.text_offset += len(token)
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}
