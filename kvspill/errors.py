"""User-facing errors.

Every error a user can cause (a bad model path, a prompt too long, an invalid sampling value)
is a `KvspillError` subclass whose message says what to change. The CLI prints these without
a traceback; the server maps them to OpenAI-style 4xx bodies.
"""

from __future__ import annotations


class KvspillError(Exception):
    """Base class: a problem the user can fix; the message says how."""


class ModelNotFoundError(KvspillError):
    """The model path or id could not be found or read."""


class UnsupportedModelError(KvspillError):
    """The model's architecture (or a feature of it) is not supported."""


class InvalidParameterError(KvspillError, ValueError):
    """A sampling or engine parameter has an invalid value.

    `param` names the offending field (the server reports it as the OpenAI error `param`).
    """

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


class ChatTemplateError(InvalidParameterError):
    """The model's chat template refused the messages (its raise_exception: roles that do not
    alternate, a role it does not take) or does not compile; the message is the template's own.
    An InvalidParameterError of `messages`: the server answers 400."""

    def __init__(self, message: str) -> None:
        super().__init__("messages", message)


class ContextLengthExceededError(KvspillError, ValueError):
    """The prompt (or prompt + max_tokens) does not fit the model's context."""

    def __init__(self, max_model_len: int, num_prompt_tokens: int, max_tokens: int | None = None) -> None:
        message = (
            f"This model's maximum context length is {max_model_len} tokens. "
            f"However, your request has {num_prompt_tokens} input tokens"
        )
        if max_tokens is not None:
            message += f" and asks for {max_tokens} output tokens ({num_prompt_tokens + max_tokens} in total)"
        message += ". Please reduce the length of the prompt"
        message += " or max_tokens." if max_tokens is not None else "."
        message += " (Or raise --max-model-len, with --rope-scaling if past the trained length.)"
        super().__init__(message)
        self.max_model_len = max_model_len
        self.num_prompt_tokens = num_prompt_tokens
        self.max_tokens = max_tokens


class OutOfKVMemoryError(KvspillError):
    """The KV cache cannot hold even one request of the asked length; the message gives numbers."""


class KVCacheBusyError(KvspillError):
    """The KV tiers have no room for this request now (others hold it). The server holds such a
    request until running ones end (server/async_engine.py); an in-process caller retries later."""


class DiskTierError(KvspillError):
    """The disk KV tier cannot be created at its budget (no space, no such directory, no rights)."""


class PersistDirError(KvspillError):
    """--kv-persist-dir cannot be used (a file, a path under a file, no rights to write)."""


class StepError(RuntimeError):
    """An engine step failed (not a user error): `req_ids` are the requests it ran, the ones a
    server must fail; requests that were only waiting are untouched."""

    def __init__(self, req_ids: list[str], cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.req_ids = req_ids


class DiskTierIOError(OSError):
    """A read or write of the disk KV tier's file failed after start (a media error, the file
    truncated, the filesystem gone). It fails the step that needed those blocks, never the
    process; the engine then retires the blocks, or with `broken` (a failed write, or a file
    found shorter than reserved) stops spilling to the disk tier: `ColdPrefixCache.on_disk_error`.

    `op`: "read" or "write"; `block_ids`: the disk block ids of the failed call; `offset`: the
    byte offset in `path`."""

    def __init__(
        self,
        op: str,
        path: str,
        offset: int,
        block_ids: tuple[int, ...],
        detail: str,
        code: int,
        broken: bool,
    ) -> None:
        first, last = (block_ids[0], block_ids[-1]) if block_ids else (-1, -1)
        which = f"block {first}" if len(block_ids) == 1 else f"{len(block_ids)} blocks ({first}..{last})"
        super().__init__(code, f"disk KV tier: {op} of {which} at byte {offset} of {path} failed: {detail}")
        self.op, self.path, self.offset, self.block_ids = op, path, offset, block_ids
        self.detail, self.broken = detail, broken

    def __reduce__(self) -> tuple[object, ...]:  # pickles across tensor-parallel ranks
        args = (self.op, self.path, self.offset, self.block_ids, self.detail, self.errno, self.broken)
        return (type(self), args)

    def __str__(self) -> str:
        return str(self.strerror)


class ForbiddenPathError(KvspillError):
    """A path the server may not read (outside its allowed roots): HTTP 403, `param` names the field."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
