"""The offline Python API: `LLM(model=None, **engine_options)`, `generate`, `chat`.

    from kvspill import LLM, SamplingParams
    llm = LLM()                        # the embedded SmolLM2-135M-Instruct
    out = llm.generate(["def fib(n):"], SamplingParams(temperature=0, max_tokens=32))
    print(out[0].text, out[0].finish_reason)

All prompts are queued at once and run through the engine's one step loop (`LLMEngine.run()`)
together; outputs come back in the order of the prompts. A model without a tokenizer (`random:` shapes) takes
token-id prompts only, with `SamplingParams(detokenize=False)`; what needs text raises.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from transformers import PreTrainedTokenizerBase

from kvspill.config import EngineConfig
from kvspill.engine.core import LLMEngine
from kvspill.errors import UnsupportedModelError
from kvspill.sampling_params import SamplingParams
from kvspill.text.tokenizer import TokenizerBundle
from kvspill.types import RequestOutput

Message = dict[str, Any]


class LLM:
    def __init__(self, model: str | None = None, **engine_options: Any) -> None:
        self.engine = LLMEngine(EngineConfig(model=model, **engine_options))

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
        prompts: str | list[int] | Sequence[str | list[int]],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Run every prompt (text or token ids) to completion; outputs in prompt order."""
        if isinstance(prompts, str) or (
            prompts and isinstance(prompts, list) and isinstance(prompts[0], int)
        ):
            prompts = [prompts]
        prompt_list = list(prompts)
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
        self, prompt: str | list[int], params: SamplingParams | None = None
    ) -> Iterator[RequestOutput]:
        """Yield one output per step for a single prompt (deltas in `delta_text`)."""
        req_id = self.engine.add_request(prompt, params)
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
    ) -> list[RequestOutput]:
        """Apply the model's chat template to one conversation (or several) and generate.

        The keyword arguments are vLLM's `LLM.chat` ones: `continue_final_message` (with
        add_generation_prompt=False) continues the last, assistant, message; `tools` (OpenAI's
        function shape) and `chat_template_kwargs` (e.g. {"enable_thinking": False}) reach the
        template."""
        conversations = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        template_kwargs = {
            **(chat_template_kwargs or {}),
            "add_generation_prompt": add_generation_prompt,
            "continue_final_message": continue_final_message,
            **({"tools": tools} if tools is not None else {}),
        }
        prompts = [self.chat_prompt(conv, **template_kwargs) for conv in conversations]  # type: ignore[arg-type]
        return self.generate(prompts, params)
