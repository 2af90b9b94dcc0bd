"""The offline Python API: `LLM(model=None, **engine_options)`, `generate`, `chat`.

    from kvspill import LLM, SamplingParams
    llm = LLM()                        # the embedded SmolLM2-135M-Instruct
    out = llm.generate(["def fib(n):"], SamplingParams(temperature=0, max_tokens=32))
    print(out[0].text, out[0].finish_reason)

All prompts are queued at once and run through the engine's one step loop (`LLMEngine.run()`)
together; outputs come back in the order of the prompts. A model without a tokenizer (`random:` shapes) takes
token-id prompts only, with `SamplingParams(detokenize=False)`; what needs text raises.

vLLM's call shapes work too: a prompt may be vLLM's TextPrompt `{"prompt": str}` or TokensPrompt
`{"prompt_token_ids": [int, ...]}`; `sampling_params=` is `params`. The engine options take the
command line's text forms as well (`max_model_len="16K"`, `rope_scaling="yarn:4"`,
`cpu_kv_budget_bytes="32GiB"`: `options.python_engine_kwargs`).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from transformers import PreTrainedTokenizerBase

from kvspill.config import EngineConfig
from kvspill.engine.core import LLMEngine
from kvspill.errors import InvalidParameterError, UnsupportedModelError
from kvspill.options import python_engine_kwargs
from kvspill.sampling_params import SamplingParams
from kvspill.text.tokenizer import TokenizerBundle
from kvspill.types import RequestOutput

Message = dict[str, Any]
# vLLM's TextPrompt {"prompt": str} and TokensPrompt {"prompt_token_ids": [int, ...]}
PromptDict = Mapping[str, Any]
Prompt = str | list[int] | PromptDict
_ACCEPTED = (
    "a prompt is a str, a list of token ids, or vLLM's {'prompt': str} / {'prompt_token_ids': [int, ...]}"
)


def _prompt(value: Any) -> str | list[int]:
    """One prompt as the engine takes it: text, or token ids (vLLM's prompt dicts unwrapped)."""
    if isinstance(value, Mapping):
        extra = sorted(set(value) - {"prompt", "prompt_token_ids"})
        if extra:
            raise InvalidParameterError(
                "prompt", f"a prompt dict takes 'prompt' or 'prompt_token_ids'; kvspill takes no {extra}"
            )
        if "prompt_token_ids" in value:  # vLLM: the token ids win over a 'prompt' beside them
            value = value["prompt_token_ids"]
        elif "prompt" in value:
            value = value["prompt"]
            if not isinstance(value, str):
                raise InvalidParameterError("prompt", f"'prompt' must be a str, got {type(value).__name__}")
        else:
            raise InvalidParameterError("prompt", f"an empty prompt dict: {_ACCEPTED}")
    if isinstance(value, str):
        return value
    if isinstance(value, Iterable) and not isinstance(value, (bytes, Mapping)):
        ids = list(value)
        for t in ids:
            if not hasattr(t, "__index__"):
                raise InvalidParameterError(
                    "prompt", f"token ids are ints; got {t!r} ({type(t).__name__}). {_ACCEPTED}"
                )
        return [operator.index(t) for t in ids]  # Python ints (numpy's and torch's converted)
    raise InvalidParameterError("prompt", f"got a {type(value).__name__}: {_ACCEPTED}")


def _params_arg(params: Any, sampling_params: Any) -> Any:
    """`params`, or vLLM's name for it, `sampling_params` (not both)."""
    if sampling_params is None:
        return params
    if params is not None:
        raise InvalidParameterError(
            "sampling_params", "give params or sampling_params (its vLLM name), not both"
        )
    return sampling_params


class LLM:
    def __init__(self, model: str | None = None, **engine_options: Any) -> None:
        self.engine = LLMEngine(EngineConfig(model=model, **python_engine_kwargs(engine_options)))

    def close(self) -> None:
        """Stop the engine's tensor-parallel workers, if any (engine/parallel.py)."""
        self.engine.close()

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self._tokenizer_bundle().hf

    def _tokenizer_bundle(self) -> TokenizerBundle:
        if self.engine.tokenizer is None:
            raise UnsupportedModelError(
                f"The model {self.engine.config.model!r} has no tokenizer: it takes token-id prompts "
                "only (lists of ints, with SamplingParams(detokenize=False)), not text or chat messages."
            )
        return self.engine.tokenizer

    @property
    def sampling_defaults(self) -> Mapping[str, float | int]:
        """The model's recommended sampling values (--generation-config), by SamplingParams field;
        {} where it has none or no tokenizer."""
        return self.engine.sampling_defaults

    def get_default_sampling_params(self) -> SamplingParams:
        """What `generate` and `chat` use without params (vLLM's name): SamplingParams() with the
        model's recommended values (--generation-config, text/sampling_defaults.py)."""
        return self.engine.default_sampling_params()

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Run every prompt (text, token ids, or vLLM's prompt dicts) to completion; outputs in
        prompt order. `sampling_params` is vLLM's name for `params`."""
        params = _params_arg(params, sampling_params)
        if isinstance(prompts, (str, Mapping)) or (
            prompts and isinstance(prompts, list) and isinstance(prompts[0], int)
        ):
            prompts = [prompts]  # one prompt
        if not isinstance(prompts, Iterable):
            raise InvalidParameterError("prompts", f"prompts are one prompt or a list of them; {_ACCEPTED}")
        prompt_list = [_prompt(p) for p in prompts]
        if params is None or isinstance(params, SamplingParams):
            params_list = [params or self.engine.default_sampling_params()] * len(prompt_list)
        else:
            params_list = list(params)
            if len(params_list) != len(prompt_list):
                raise ValueError(f"got {len(prompt_list)} prompts but {len(params_list)} SamplingParams")
        req_ids = []
        try:
            for prompt, p in zip(prompt_list, params_list, strict=True):
                req_ids.append(self.engine.add_request(prompt, p))
        except Exception:
            for r in req_ids:
                self.engine.abort_request(r)
            raise
        finals = {out.req_id: out for step in self.engine.run() for out in step.outputs if out.finished}
        return [finals[r] for r in req_ids]

    def stream(
        self,
        prompt: Prompt,
        params: SamplingParams | None = None,
        *,
        sampling_params: SamplingParams | None = None,
    ) -> Iterator[RequestOutput]:
        """Yield one output per step for a single prompt (deltas in `delta_text`)."""
        req_id = self.engine.add_request(_prompt(prompt), _params_arg(params, sampling_params))
        try:
            for step in self.engine.run():
                for out in step.outputs:
                    if out.req_id == req_id:
                        yield out
                        if out.finished:
                            return
        finally:
            self.engine.abort_request(req_id)

    def chat_prompt(self, messages: list[Message], **template_kwargs: Any) -> list[int]:
        """Token ids of one conversation through the chat template (`chat`'s keyword arguments)."""
        return self._tokenizer_bundle().apply_chat_template(messages, **template_kwargs)

    def chat(
        self,
        messages: list[Message] | Sequence[list[Message]],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: list[dict[str, Any]] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Apply the model's chat template to one conversation (or several) and generate.

        The keyword arguments are vLLM's `LLM.chat` ones: `sampling_params` (`params`);
        `continue_final_message` (with add_generation_prompt=False) continues the last,
        assistant, message; `tools` (OpenAI's function shape) and `chat_template_kwargs` (e.g.
        {"enable_thinking": False}) reach the template."""
        params = _params_arg(params, sampling_params)
        conversations = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        template_kwargs = {
            **(chat_template_kwargs or {}),
            "add_generation_prompt": add_generation_prompt,
            "continue_final_message": continue_final_message,
            **({"tools": tools} if tools is not None else {}),
        }
        prompts = [self.chat_prompt(conv, **template_kwargs) for conv in conversations]  # type: ignore[arg-type]
        return self.generate(prompts, params)
