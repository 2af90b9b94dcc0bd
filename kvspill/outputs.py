"""What the engine hands back to callers: one `RequestOutput` per request per step it changed.

`text`/`token_ids` are cumulative; `delta_text`/`delta_token_ids` are what this step added
(what a stream sends). Stop strings are already applied: `text` never contains a stop string
unless `include_stop_str_in_output`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvspill.types import TokenLogprobs


@dataclass
class RequestOutput:
    req_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    delta_text: str = ""
    delta_token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprobs] = field(default_factory=list)
    finished: bool = False
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    stop_reason: int | str | None = None  # the stop token id or stop string that ended it
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    error: str | None = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids)
