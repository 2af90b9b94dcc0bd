"""Precache: prefill a prompt prefix built from files and keep its KV blocks for later requests.

`kvspill precache FILES_OR_DIR --prompt-template ...` (with `--kv-persist-dir`, so the blocks
outlive the command) and `POST /v1/precache` (into a running server's tiers) both build the
prefix text here and run it as one request of a single output token; its full blocks stay in the
prefix caches of the tiers (and the persist dir) when it finishes, so the first question that
starts with the same text is a prefix hit. Prefix hits are by tokens: a question must begin with
exactly the text (the same chat-template framing) that was precached.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kvspill.errors import InvalidParameterError
from kvspill.sampling_params import SamplingParams

DEFAULT_TEMPLATE = "{files}"
FILE_HEADER = "### {path}\n"
MAX_FILE_BYTES = 4 * 2**20  # bigger files are refused with the path: a prompt, not a dataset


def read_files(paths: list[str]) -> list[tuple[str, str]]:
    """(relative path, text) of every file given and every text file under the dirs given, sorted
    by path within a dir; hidden entries are left out. A binary or huge file is an error."""
    files: list[tuple[str, str]] = []
    for given in paths:
        root = Path(given)
        if root.is_file():
            files.append((root.name, _read_text(root)))
        elif root.is_dir():
            for path in sorted(_walk(root)):
                files.append((str(path.relative_to(root)), _read_text(path)))
        else:
            raise InvalidParameterError("files", f"{given} is neither a file nor a directory")
    if not files:
        raise InvalidParameterError("files", f"no files found in {' '.join(paths)}")
    return files


def _walk(root: Path) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        out.extend(Path(dirpath, name) for name in filenames if not name.startswith("."))
    return out


def _read_text(path: Path) -> str:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise InvalidParameterError("files", f"{path} is over {MAX_FILE_BYTES >> 20} MiB: leave it out")
    data = path.read_bytes()
    if b"\0" in data:
        raise InvalidParameterError("files", f"{path} looks binary: leave it out")
    return data.decode("utf-8", errors="replace")


def build_prompt(files: list[tuple[str, str]], template: str = DEFAULT_TEMPLATE) -> str:
    """The template with `{files}` replaced by every file, each under a `### path` line."""
    if "{files}" not in template:
        raise InvalidParameterError("prompt_template", "the prompt template must contain {files}")
    body = "".join(
        FILE_HEADER.format(path=path) + text + ("" if text.endswith("\n") else "\n") for path, text in files
    )
    return template.replace("{files}", body)


def precache_params() -> SamplingParams:
    """One greedy output token: the prompt is prefilled, nothing worth generating."""
    return SamplingParams(temperature=0.0, max_tokens=1, detokenize=False)


@dataclass(frozen=True)
class PrecacheResult:
    prompt_tokens: int  # tokens of the prefix
    cached_tokens: int  # of them already cached before this run
    kept_tokens: int  # now findable by later requests: its full blocks

    def to_json(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "kept_tokens": self.kept_tokens,
        }


def result_of(num_prompt_tokens: int, num_cached_tokens: int, block_size: int) -> PrecacheResult:
    return PrecacheResult(num_prompt_tokens, num_cached_tokens, num_prompt_tokens // block_size * block_size)
