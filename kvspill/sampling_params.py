"""Per-request sampling parameters (pure Python, validated at construction).

Defaults follow vLLM/OpenAI: temperature 1.0, top_p 1.0, top_k 0 (off), min_p 0.0,
max_tokens 16. `temperature` below GREEDY_TEMPERATURE_EPS (0 included) means greedy. Invalid values raise
`InvalidParameterError` naming the field and the valid range.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvspill.errors import InvalidParameterError
from kvspill.guided.spec import GuidedSpec

LOGIT_BIAS_LIMIT = 100.0  # OpenAI's range: -100 bans a token, +100 all but forces it

# Below this a temperature is greedy, as in vLLM (_SAMPLING_EPS): dividing logits by 1e-40 gives
# infinities, and softmax over them NaNs that sample token 0 forever.
GREEDY_TEMPERATURE_EPS = 1e-5
# Stop strings a request may give and their length (OpenAI takes 4; vLLM clients send more).
MAX_STOP_STRINGS = 64
MAX_STOP_STRING_CHARS = 1024
MAX_BAD_WORDS = 256  # each step of the request compares the output's tail with every word


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: disabled
    min_p: float = 0.0
    repetition_penalty: float = 1.0  # multiplicative (HF/vLLM), over prompt and output tokens
    presence_penalty: float = 0.0  # additive (OpenAI), over output tokens
    frequency_penalty: float = 0.0  # additive per occurrence (OpenAI), over output tokens
    seed: int | None = None
    max_tokens: int | None = 16  # None: until the context is full
    min_tokens: int = 0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    logprobs: int | None = None  # number of top logprobs per token (0: only the sampled token's)
    # vLLM's prompt_logprobs: the logprob of each prompt token given its prefix, plus the top-k
    # (0: only the prompt token's); raw model logprobs, no penalties. Such a request skips the
    # prefix cache, whose hits would leave positions unscored.
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    detokenize: bool = True  # False: token ids only (benchmarks, token-id clients)
    # At max_model_len drop a middle part of the context and go on (scheduler/context_shift.py);
    # None: the engine's --context-shift
    context_shift: bool | None = None
    guided: GuidedSpec | None = None  # the grammar the output must match (kvspill/guided)
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias added to its logit)
    # vLLM's: only these token ids may be sampled (None: all)
    allowed_token_ids: tuple[int, ...] | None = None
    # vLLM's: words the output must not contain. The engine tokenizes each (bare and after a
    # space) into `bad_words_token_ids` at add_request; the sampler bans a word's last token
    # where the output so far ends with the rest of it (sampling/token_bans.py).
    bad_words: tuple[str, ...] = ()
    bad_words_token_ids: tuple[tuple[int, ...], ...] = ()
    # vLLM's: keep only the prompt's last k tokens (-1: the last max_model_len - 1); None: all
    truncate_prompt_tokens: int | None = None
    # This request's window on the gpu tier (kv/tiers.py): None takes the engine's
    # --hot-window-tokens / --num-sink-blocks, which are also the most it may ask
    # (scheduler/request_window.py checks that, as only the engine knows its flags).
    hot_window_tokens: int | None = None
    num_sink_blocks: int | None = None

    def __post_init__(self) -> None:
        # Accept a single string or any iterable for the tuple fields.
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif not isinstance(self.stop, tuple):
            object.__setattr__(self, "stop", tuple(self.stop or ()))
        if not isinstance(self.stop_token_ids, tuple):
            object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids or ()))
        if isinstance(self.logit_bias, dict):
            object.__setattr__(self, "logit_bias", tuple(sorted(self.logit_bias.items())))
        if isinstance(self.bad_words, str):
            object.__setattr__(self, "bad_words", (self.bad_words,))
        for name in ("allowed_token_ids", "bad_words", "bad_words_token_ids"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        if self.bad_words_token_ids and not all(isinstance(w, tuple) for w in self.bad_words_token_ids):
            object.__setattr__(self, "bad_words_token_ids", tuple(tuple(w) for w in self.bad_words_token_ids))
        self._validate()

    def _validate(self) -> None:
        def bad(param: str, msg: str) -> InvalidParameterError:
            return InvalidParameterError(param, f"{param}: {msg}")

        if not (0.0 <= self.temperature <= 100.0):
            raise bad("temperature", f"must be in [0, 100] (0 = greedy), got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise bad("top_p", f"must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            raise bad("top_k", f"must be -1 or 0 (disabled) or a positive count, got {self.top_k}")
        if not (0.0 <= self.min_p <= 1.0):
            raise bad("min_p", f"must be in [0, 1], got {self.min_p}")
        if not (0.0 < self.repetition_penalty <= 10.0):
            raise bad("repetition_penalty", f"must be in (0, 10], got {self.repetition_penalty}")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not (-2.0 <= value <= 2.0):
                raise bad(name, f"must be in [-2, 2], got {value}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise bad("max_tokens", f"must be at least 1, got {self.max_tokens}")
        if self.min_tokens < 0 or (self.max_tokens is not None and self.min_tokens > self.max_tokens):
            raise bad("min_tokens", f"must be in [0, max_tokens], got {self.min_tokens}")
        if self.logprobs is not None and not (0 <= self.logprobs <= 20):
            raise bad("logprobs", f"must be in [0, 20], got {self.logprobs}")
        if self.prompt_logprobs is not None and not (0 <= self.prompt_logprobs <= 20):
            raise bad("prompt_logprobs", f"must be in [0, 20], got {self.prompt_logprobs}")
        if self.seed is not None and not (-(2**63) <= self.seed < 2**64):
            raise bad("seed", "must fit in 64 bits")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise bad("stop", "must be non-empty strings")
        if len(self.stop) > MAX_STOP_STRINGS:
            raise bad("stop", f"at most {MAX_STOP_STRINGS} stop strings, got {len(self.stop)}")
        if any(len(s) > MAX_STOP_STRING_CHARS for s in self.stop):
            longest = max(len(s) for s in self.stop)
            raise bad(
                "stop", f"each stop string may have at most {MAX_STOP_STRING_CHARS} characters, got {longest}"
            )
        if any(not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            raise bad("stop_token_ids", "must be non-negative token ids")
        for token, bias in self.logit_bias:
            if not isinstance(token, int) or token < 0:
                raise bad("logit_bias", f"keys must be non-negative token ids, got {token!r}")
            if not (-LOGIT_BIAS_LIMIT <= bias <= LOGIT_BIAS_LIMIT):
                raise bad("logit_bias", f"values must be in [-100, 100], got {bias} for token {token}")
        self._validate_token_bans(bad)
        for name in ("hot_window_tokens", "num_sink_blocks"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise bad(name, f"must be a non-negative integer, got {value!r}")
        if self.guided is not None and (self.ignore_eos or self.min_tokens):
            # The grammar ends on a stop token: forbidding it would leave no token to sample.
            raise bad(
                "ignore_eos" if self.ignore_eos else "min_tokens", "cannot be combined with guided decoding"
            )

    def _validate_token_bans(self, bad: Callable[[str, str], InvalidParameterError]) -> None:
        """allowed_token_ids, bad_words and truncate_prompt_tokens (vLLM's extras)."""
        if self.allowed_token_ids is not None:
            if not self.allowed_token_ids:
                raise bad("allowed_token_ids", "must list at least one token id (or leave it out)")
            if any(not _is_token_id(t) for t in self.allowed_token_ids):
                raise bad("allowed_token_ids", "must be non-negative token ids")
        if any(not isinstance(w, str) or not w.strip() for w in self.bad_words):
            raise bad("bad_words", "must be non-empty words (not only spaces)")
        if len(self.bad_words) > MAX_BAD_WORDS:
            raise bad("bad_words", f"at most {MAX_BAD_WORDS} words, got {len(self.bad_words)}")
        if any(len(w) > MAX_STOP_STRING_CHARS for w in self.bad_words):
            raise bad("bad_words", f"each word may have at most {MAX_STOP_STRING_CHARS} characters")
        if any(not w or not all(_is_token_id(t) for t in w) for w in self.bad_words_token_ids):
            raise bad("bad_words", "each word's token ids must be a non-empty list of non-negative ids")
        k = self.truncate_prompt_tokens
        if k is not None and (not isinstance(k, int) or isinstance(k, bool) or not (k == -1 or k >= 1)):
            raise bad("truncate_prompt_tokens", f"must be -1 (the model's length) or at least 1, got {k!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE_EPS

    @property
    def needs_logits_processing(self) -> bool:
        """Anything that edits the logits before the draw (penalties, bias, grammar)."""
        return (
            self.needs_penalties
            or bool(self.logit_bias)
            or self.guided is not None
            or self.allowed_token_ids is not None
            or bool(self.bad_words_token_ids)
        )

    @property
    def reads_output_values(self) -> bool:
        """Whether sampling looks at the values of earlier output tokens (penalties, bad words),
        so an async step must have the previous step's token first (runner/model_runner.py)."""
        return self.needs_penalties or bool(self.bad_words_token_ids)

    @property
    def needs_penalties(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0


def _is_token_id(t: object) -> bool:
    return isinstance(t, int) and not isinstance(t, bool) and t >= 0


GREEDY = SamplingParams(temperature=0.0)
