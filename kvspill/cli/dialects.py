"""Other servers' flag names (vLLM, SGLang, llama-server) read as kvspill's own.

Someone who runs `vllm serve --swap-space 8 --seed 1` or `llama-server -c 8192` can bring that
line to `kvspill serve`: each alias becomes the kvspill flag it names before click parses the
command line, and prints one `note:` line on stderr saying what it was read as.

Invariants:
- One table, `ALIASES`: the command-line rewrite (`rewrite_args`, run by `DialectCommand` for
  `serve`, `generate` and `chat`), the config file's keys (`cli/config_file.py`, TOML or vLLM's
  YAML) and docs/flags.md's "Aliases" section (`cli/flags_doc.py`) all read it.
- An alias is rewritten into the kvspill flag before click reads anything, so precedence stays
  click's own: command line > `KVSPILL_<FLAG>` > config file > default.
- What cannot map (vLLM's `--no-enable-chunked-prefill`, a KV connector other than the
  OffloadingConnector, ...) raises `DialectError`: one line saying what to use instead, exit 2.
  An alias given beside the flag it maps to (or beside another alias of it) is refused too:
  which one should win would be a guess. An action (llama-server's `--version` on `serve`) is an
  alias too, not an option: like `--print-config` it has no `KVSPILL_*` variable to stop a service.
- Only the forms `--name VALUE`, `--name=VALUE` and `-n VALUE` are aliases; the value of another
  option (`--stop -c`) and anything after `--` are never read as one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import typer
import typer.core

from kvspill.errors import KvspillError

ENGINE_COMMANDS = frozenset({"serve", "generate", "chat"})
SERVE = frozenset({"serve"})
CLI = frozenset({"generate", "chat"})  # llama-cli's sampling flags
_TP_NAMES = ("--tensor-parallel-size", "-tp", "--tp-size")


class DialectError(KvspillError):
    """Another server's flag that kvspill cannot honour; the message says what to use instead."""


class PrintAndExit(Exception):
    """An alias that is an action (llama-server's `--version`): print `text`, exit 0."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


@dataclass(frozen=True)
class Reading:
    """What an alias was read as: kvspill's flags and values (empty: accepted, nothing to set)
    and why, in words, for the `note:` line."""

    args: tuple[str, ...]
    why: str = ""


@dataclass(frozen=True)
class Alias:
    """One other server's flag. `read(value, given)` turns its value (None for a flag without
    one) into a `Reading` or raises DialectError; `given` holds the other flags of the same
    command line by name (the tensor-parallel size a total is divided by). `target`: the
    kvspill flag it sets, for refusing both at once."""

    names: tuple[str, ...]
    origin: str
    maps_to: str  # for docs/flags.md
    read: Callable[[str | None, Mapping[str, str]], Reading]
    target: str | None = None
    takes_value: bool = True
    commands: frozenset[str] = ENGINE_COMMANDS
    in_files: bool = True  # also a config-file key (an action is not)
    # A flag whose next word is its value only when it is one of these (llama-server's `-fa on`,
    # which older builds took as `-fa` alone)
    optional_values: frozenset[str] = frozenset()


def _number(value: str | None, flag: str, unit: str) -> float:
    try:
        number = float(value or "")
    except ValueError:
        number = -1.0
    if not number >= 0:
        raise DialectError(f"{flag} takes a number of {unit} (0 or more), got {value!r}")
    return number


def _tensor_parallel(given: Mapping[str, str]) -> int:
    for name in _TP_NAMES:
        if name in given and given[name].isdigit() and int(given[name]) > 0:
            return int(given[name])
    return 1


def _accepted(why: str) -> Callable[[str | None, Mapping[str, str]], Reading]:
    """An alias that sets nothing: what kvspill does anyway, said in `why`."""
    return lambda value, given: Reading((), why)


def _refused(message: str) -> Callable[[str | None, Mapping[str, str]], Reading]:
    """An alias kvspill cannot honour: DialectError with `message` (what to use instead)."""

    def read(value: str | None, given: Mapping[str, str]) -> Reading:
        raise DialectError(message)

    return read


def _accepted_values(
    values: Collection[str], why: str, refusal: str, refusals: Mapping[str, str] | None = None
) -> Callable[[str | None, Mapping[str, str]], Reading]:
    """An alias that sets nothing for `values` (what kvspill does anyway, said in `why`) and is
    refused for any other: DialectError with `refusals[value]` or `refusal`, `{value}` filled in."""

    def read(value: str | None, given: Mapping[str, str]) -> Reading:
        if value is not None and value.strip() in values:
            return Reading((), why)
        raise DialectError((refusals or {}).get(str(value), refusal).format(value=value))

    return read


def _rename(target: str, why: str = "") -> Callable[[str | None, Mapping[str, str]], Reading]:
    """An alias whose value is the target flag's value as it stands."""
    return lambda value, given: Reading((target, str(value)), why)


def _swap_space(value: str | None, given: Mapping[str, str]) -> Reading:
    gib = _number(value, "--swap-space", "GiB")
    return Reading(("--cpu-kv-budget", f"{gib:g}GiB"), "a cpu KV tier of that many GiB per GPU")


def _kv_offloading_size(value: str | None, given: Mapping[str, str]) -> Reading:
    gib = _number(value, "--kv-offloading-size", "GiB")
    tp = _tensor_parallel(given)
    why = "vLLM's size is over all GPUs, --cpu-kv-budget is per GPU" if tp > 1 else ""
    return Reading(("--cpu-kv-budget", f"{gib / tp:g}GiB"), why)


def _chunked_prefill_size(value: str | None, given: Mapping[str, str]) -> Reading:
    if value is not None and value.strip() == "-1":
        raise DialectError(
            "--chunked-prefill-size -1 (no chunking): kvspill always chunks prefill; give the chunk "
            "in tokens, e.g. --chunked-prefill-size 8192 (= --max-num-batched-tokens)"
        )
    return Reading(("--max-num-batched-tokens", str(value)))


def _ctx_size(value: str | None, given: Mapping[str, str]) -> Reading:
    if value is not None and value.strip() == "0":
        return Reading((), "0 is the model's trained context, kvspill's default (no --max-model-len)")
    return Reading(("--max-model-len", str(value)))


def _gpu_layers(value: str | None, given: Mapping[str, str]) -> Reading:
    text = (value or "").strip().lower()
    if text == "0":
        return Reading(("--device", "cpu"), "no layer on the GPU")
    if text in ("all", "auto", "-1") or (text.isdigit() and int(text) > 0):
        return Reading(
            (),
            "kvspill puts the weights on the GPU by its memory plan, the rest in RAM "
            "(an explicit split: --cpu-offload-gb N, a limit: --vram-budget SIZE)",
        )
    raise DialectError(f"-ngl / --n-gpu-layers takes a number of layers, all or auto, got {value!r}")


_LLAMA_KV_TYPES = {"f16": "auto", "bf16": "auto", "f32": "auto", "q8_0": "int8"}


def _cache_type(
    flag: str, other: tuple[str, ...], defers: bool
) -> Callable[[str | None, Mapping[str, str]], Reading]:
    """-ctk / -ctv: kvspill quantizes K and V alike (--kv-cache-dtype), so the two must agree; the
    one that `defers` sets nothing when the other is given."""

    def read(value: str | None, given: Mapping[str, str]) -> Reading:
        kind = _LLAMA_KV_TYPES.get((value or "").strip().lower())
        if kind is None:
            raise DialectError(
                f"{flag} {value}: kvspill's KV types are the model's (f16, bf16), int8 (for q8_0) and fp8; "
                "give one of f16, bf16, q8_0, or --kv-cache-dtype fp8"
            )
        mine = (value or "").strip().lower()
        theirs = next((given[o].strip().lower() for o in other if o in given), None)
        if theirs is not None and _LLAMA_KV_TYPES.get(theirs) != kind:
            raise DialectError(
                f"{flag} {value} and {'/'.join(other)} {theirs}: kvspill quantizes K and V alike; give both the same type"
            )
        if "--kv-cache-dtype" in given:
            raise DialectError(f"{flag} and --kv-cache-dtype both set the KV type: give one of them")
        if theirs is not None and defers:
            return Reading((), f"the same type as {'/'.join(other)}")  # that flag sets it
        why = (
            "kvspill's 8-bit KV: one scale per token and head"
            if kind == "int8"
            else f"{mine} is the model's dtype"
        )
        if theirs is None and kind != "auto":
            why += "; K and V alike"
        return Reading(("--kv-cache-dtype", kind), why)

    return read


def _prompt(value: str | None, given: Mapping[str, str]) -> Reading:
    text = str(value)
    if text.startswith("-"):
        raise DialectError(
            "-p / --prompt: a prompt that starts with '-' reads as a flag; give it after -- instead"
        )
    return Reading((text,), "the PROMPT argument")


def _version(value: str | None, given: Mapping[str, str]) -> Reading:
    from kvspill import __version__

    raise PrintAndExit(__version__)


def _kv_transfer_config(value: str | None, given: Mapping[str, str]) -> Reading:
    """vLLM's OffloadingConnector JSON as the cpu tier, per GPU (`offloading_bytes` reads it)."""
    try:
        config = json.loads(value or "")
    except json.JSONDecodeError as e:
        raise DialectError(f"--kv-transfer-config is not JSON ({e.msg}): give vLLM's JSON object") from e
    tp = _tensor_parallel(given)
    per_gpu = offloading_bytes(config) // tp
    why = "cpu_bytes_to_use is over all GPUs, --cpu-kv-budget is per GPU" if tp > 1 else ""
    return Reading(("--cpu-kv-budget", f"{per_gpu}B"), why)


_CONNECTOR_KEYS = {"kv_connector", "kv_role", "kv_connector_extra_config"}
_EXTRA_KEYS = {"cpu_bytes_to_use", "block_size", "spec_name", "num_cpu_blocks"}


def offloading_bytes(config: Any) -> int:
    """The CPU bytes of vLLM's `{"kv_connector": "OffloadingConnector", "kv_connector_extra_config":
    {"cpu_bytes_to_use": N}}` (vLLM's docs, "KV Offloading Usage Guide"); DialectError for any
    other connector or a key that would change what the tier does."""
    if not isinstance(config, dict):
        raise DialectError("--kv-transfer-config must be a JSON object, e.g. " + _EXAMPLE)
    connector = config.get("kv_connector")
    if connector != "OffloadingConnector":
        raise DialectError(
            f"--kv-transfer-config: the {connector or 'missing'} connector is not supported (kvspill moves KV "
            "between its own tiers, not to LMCache, NIXL or another instance); give the OffloadingConnector "
            "JSON or --cpu-kv-budget SIZE (and --disk-kv-budget SIZE)"
        )
    extra = config.get("kv_connector_extra_config") or {}
    unknown = sorted((set(config) - _CONNECTOR_KEYS) | (set(extra) - _EXTRA_KEYS))
    if unknown or config.get("kv_role", "kv_both") != "kv_both":
        what = f"the keys {unknown}" if unknown else f"kv_role {config.get('kv_role')!r}"
        raise DialectError(f"--kv-transfer-config: {what} have no kvspill equivalent; give only " + _EXAMPLE)
    if extra.get("spec_name", "CPUOffloadingSpec") != "CPUOffloadingSpec":
        raise DialectError(
            f"--kv-transfer-config: spec_name {extra['spec_name']!r}: kvspill reads only the CPU spec; "
            "for a tier past RAM give --disk-kv-budget SIZE"
        )
    size = extra.get("cpu_bytes_to_use")
    if "num_cpu_blocks" in extra or not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise DialectError(
            "--kv-transfer-config: give the CPU size as cpu_bytes_to_use (bytes; a block count "
            "depends on the model), e.g. " + _EXAMPLE
        )
    return size


_EXAMPLE = (
    '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both", '
    '"kv_connector_extra_config": {"cpu_bytes_to_use": 8000000000}}'
)


ALIASES: tuple[Alias, ...] = (
    Alias(("--swap-space",), "vLLM", "--cpu-kv-budget NGiB (a cpu KV tier of N GiB per GPU)", _swap_space,
          "--cpu-kv-budget"),
    Alias(("--seed",), "vLLM", "--engine-seed N (serve only: in generate and chat --seed is the sampling seed)",
          _rename("--engine-seed"), "--engine-seed", commands=SERVE),
    Alias(("--enable-chunked-prefill",), "vLLM", "accepted: prefill is always chunked", _accepted("kvspill always chunks prefill (the chunk: --max-num-batched-tokens)"),
          takes_value=False),
    Alias(("--no-enable-chunked-prefill",), "vLLM", "refused: prefill is always chunked; set "
          "--max-num-batched-tokens", _refused("--no-enable-chunked-prefill: kvspill always chunks prefill; leave it out and set the "
        "chunk with --max-num-batched-tokens N (e.g. the longest prompt, for one chunk)"), takes_value=False),
    Alias(("--trust-remote-code",), "vLLM, SGLang", "accepted: kvspill runs no model code",
          _accepted("kvspill runs no code from a model repository; its supported architectures run natively"), takes_value=False),
    Alias(("--enable-auto-tool-choice",), "vLLM", "accepted: tool calls are read whenever a request has tools",
          _accepted("a chat request with tools has its tool calls read (the format: --tool-call-parser)"), takes_value=False, commands=SERVE),
    Alias(("--disable-log-requests", "--disable-log-stats"), "vLLM", "accepted: kvspill logs neither",
          _accepted("kvspill logs neither requests' contents nor periodic stats (/metrics has the numbers)"), takes_value=False, commands=SERVE),
    Alias(("--enable-log-requests",), "vLLM", "refused: no log of requests' contents", _refused("--enable-log-requests: kvspill has no log of requests' contents; leave it out (the access log "
        "has a line per request, /metrics the counts and latencies)"),
          takes_value=False, commands=SERVE),
    Alias(("--kv-transfer-config",), "vLLM", "--cpu-kv-budget cpu_bytes_to_use B of the OffloadingConnector "
          "JSON (per GPU); other connectors refused", _kv_transfer_config, "--cpu-kv-budget"),
    Alias(("--kv-offloading-size",), "vLLM", "--cpu-kv-budget (N GiB over all GPUs) / --tensor-parallel-size",
          _kv_offloading_size, "--cpu-kv-budget"),
    Alias(("--kv-offloading-backend",), "vLLM", "native accepted (kvspill's own tiers); lmcache refused",
          _accepted_values(
              {"native"},
              "kvspill's own cpu tier is the native backend (its size: --kv-offloading-size)",
              "--kv-offloading-backend {value}: kvspill has its own tiers and no {value} backend; leave it out "
              "and size the cpu tier with --cpu-kv-budget SIZE (and a disk tier with --disk-kv-budget)",
          ), takes_value=True),
    Alias(("-tp",), "vLLM", "--tensor-parallel-size N", _rename("--tensor-parallel-size"),
          "--tensor-parallel-size"),
    Alias(("--load-format",), "vLLM", "auto, safetensors, gguf accepted (what the model has); others refused",
          _accepted_values(
              {"auto", "safetensors", "gguf"},
              "kvspill reads a model's safetensors or its GGUF file, whichever it has",
              "--load-format {value}: kvspill loads safetensors and GGUF files only; convert the checkpoint "
              "(transformers' save_pretrained(safe_serialization=True)) or leave the flag out",
              {"dummy": "--load-format dummy: give the model as random:<shape> for random weights "
               "(random:llama-8b, random:llama-8b:q4_k_m; the shapes: docs/architecture.md)"},
          )),
    Alias(("--tokenizer-mode",), "vLLM", "auto, hf accepted (the model's Hugging Face tokenizer); others refused",
          _accepted_values(
              {"auto", "hf"},
              "kvspill uses the model's Hugging Face tokenizer (tokenizer.json, or the GGUF's)",
              "--tokenizer-mode {value}: kvspill uses the model's Hugging Face tokenizer only (tokenizer.json, "
              "or the GGUF's own); leave the flag out, or give another with --tokenizer",
          )),
    Alias(("--pipeline-parallel-size", "-pp"), "vLLM", "1 accepted; more refused (--tensor-parallel-size)",
          _accepted_values(
              {"1"},
              "one pipeline stage, as kvspill runs",
              "--pipeline-parallel-size {value}: kvspill splits a model over GPUs by tensor parallelism; "
              "give --tensor-parallel-size N instead (docs/distributed.md)",
          )),
    Alias(("--disable-custom-all-reduce",), "vLLM", "accepted: tensor parallel sums with NCCL",
          _accepted("kvspill's tensor-parallel all-reduce is NCCL's (torch.distributed), no custom kernel"),
          takes_value=False),
    Alias(("--mem-fraction-static",), "SGLang", "--gpu-memory-utilization F (the card's share kvspill uses)",
          _rename("--gpu-memory-utilization", "the share of the card for weights, KV and activations"),
          "--gpu-memory-utilization"),
    Alias(("--context-length",), "SGLang", "--max-model-len N", _rename("--max-model-len"), "--max-model-len"),
    Alias(("--chunked-prefill-size",), "SGLang", "--max-num-batched-tokens N (-1 refused: always chunked)",
          _chunked_prefill_size, "--max-num-batched-tokens"),
    Alias(("--tp-size",), "SGLang", "--tensor-parallel-size N", _rename("--tensor-parallel-size"),
          "--tensor-parallel-size"),
    Alias(("--model-path",), "SGLang", "--model PATH", _rename("--model"), "--model"),
    Alias(("-c", "--ctx-size"), "llama-server", "--max-model-len N (0: the model's trained context)",
          _ctx_size, "--max-model-len"),
    Alias(("-ngl", "--n-gpu-layers", "--gpu-layers"), "llama-server", "accepted: the memory plan places the "
          "weights (0: --device cpu)", _gpu_layers),
    Alias(("-fa", "--flash-attn"), "llama-server", "accepted: kvspill's attention is fused", _accepted("kvspill's attention kernels are its own, fused the same way; there is no other path"),
          takes_value=False, optional_values=frozenset({"on", "off", "auto"})),
    Alias(("-ctk", "--cache-type-k"), "llama-server", "--kv-cache-dtype (f16/bf16: the model's, q8_0: int8)",
          _cache_type("-ctk", ("-ctv", "--cache-type-v"), defers=False)),
    Alias(("-ctv", "--cache-type-v"), "llama-server", "--kv-cache-dtype, as -ctk (K and V alike)",
          _cache_type("-ctv", ("-ctk", "--cache-type-k"), defers=True)),
    Alias(("-b", "--batch-size"), "llama-server", "--max-num-batched-tokens N", _rename("--max-num-batched-tokens"),
          "--max-num-batched-tokens"),
    Alias(("-ub", "--ubatch-size"), "llama-server", "accepted: the step is -b's", _accepted("kvspill sizes a prefill step by --max-num-batched-tokens (llama-server's -b)")),
    Alias(("-t", "--threads"), "llama-server", "refused: kvspill sizes its CPU threads", _refused("-t / --threads: kvspill sizes its CPU threads itself; leave it out (OMP_NUM_THREADS=N sets torch's "
        "for a model on the CPU, --cpu-attention-threads the cold tiers' attention)")),
    Alias(("-np", "--parallel"), "llama-server", "--max-num-seqs N", _rename("--max-num-seqs"), "--max-num-seqs",
          commands=SERVE),
    Alias(("-cb", "--cont-batching"), "llama-server", "accepted: always continuous", _accepted("kvspill always batches continuously"),
          takes_value=False, commands=SERVE),
    Alias(("-nocb", "--no-cont-batching"), "llama-server", "refused: always continuous", _refused("--no-cont-batching: kvspill always batches continuously; for one sequence at a time give --max-num-seqs 1"),
          takes_value=False, commands=SERVE),
    Alias(("--jinja",), "llama-server", "accepted: the model's template is always rendered", _accepted("kvspill always renders the model's Jinja chat template"),
          takes_value=False),
    Alias(("-a", "--alias"), "llama-server", "--served-model-name NAME", _rename("--served-model-name"),
          "--served-model-name", commands=SERVE),
    Alias(("--chat-template-file",), "llama-server", "--chat-template PATH", _rename("--chat-template"),
          "--chat-template"),
    Alias(("-n", "--n-predict"), "llama-cli", "--max-tokens N", _rename("--max-tokens"), "--max-tokens",
          commands=CLI),
    Alias(("--temp",), "llama-cli", "--temperature T", _rename("--temperature"), "--temperature", commands=CLI),
    Alias(("-p", "--prompt"), "llama-cli", "the PROMPT argument", _prompt, commands=frozenset({"generate"})),
    Alias(("--ssl-key-file",), "llama-server", "--ssl-keyfile PATH", _rename("--ssl-keyfile"), "--ssl-keyfile",
          commands=SERVE),
    Alias(("--ssl-cert-file",), "llama-server", "--ssl-certfile PATH", _rename("--ssl-certfile"), "--ssl-certfile",
          commands=SERVE),
    Alias(("--version",), "llama-server", "prints kvspill's version and exits (as `kvspill --version`)",
          _version, takes_value=False, commands=SERVE, in_files=False),
)  # fmt: skip
_SHORT_FORMS = {"--model": ("-m",)}  # a target's other spellings, for refusing both at once


def alias_for(name: str, command: str) -> Alias | None:
    """The alias spelled `name` (`--swap-space`, `swap_space` in a config file) in `command`."""
    flag = name if name.startswith("-") else "--" + name.replace("_", "-")
    return next((a for a in ALIASES if flag in a.names and command in a.commands), None)


def note(alias: Alias, shown: str, reading: Reading) -> str:
    """The `note:` text of alias `alias`, given as `shown`, read as `reading`."""
    if not reading.args:
        return f"{shown} ({alias.origin}) accepted: {reading.why}"
    return f"{shown} ({alias.origin}) read as {' '.join(reading.args)}" + (
        f" ({reading.why})" if reading.why else ""
    )


def _short(value: str, most: int = 40) -> str:
    """A value as a note shows it: a JSON config is not repeated whole."""
    return value if len(value) <= most else value[: most - 3] + "..."


def _split(token: str) -> tuple[str, str | None]:
    """`--name=value` -> (`--name`, `value`); any other token -> (token, None)."""
    if token.startswith("--") and "=" in token:
        name, value = token.split("=", 1)
        return name, value
    return token, None


def _given(args: list[str], value_options: frozenset[str]) -> dict[str, str]:
    """The value of every option given with one in `args` (by the name it was given as)."""
    given: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i] != "--":
        name, value = _split(args[i])
        if value is None and i + 1 < len(args) and (name in value_options or name in _TP_NAMES):
            value = args[i + 1]
            i += 1
        if value is not None:
            given[name] = value
        i += 1
    return given


def rewrite_args(command: str, args: list[str], value_options: frozenset[str]) -> tuple[list[str], list[str]]:
    """`args` of `command` with every alias replaced by the kvspill flags it reads as, and one
    note per alias. `value_options`: the command's own options that take a value (their values
    are never aliases). Raises DialectError for an alias that cannot map or a flag set twice."""
    alias_values = frozenset(n for a in ALIASES if a.takes_value and command in a.commands for n in a.names)
    given = _given(args, value_options | alias_values)
    out: list[str] = []
    notes: list[str] = []
    targets: dict[str, str] = {}  # kvspill flag -> the alias that set it
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            out += args[i:]
            break
        name, value = _split(token)
        alias = alias_for(name, command) if name.startswith("-") else None
        if alias is None:
            out.append(token)
            if value is None and name in value_options and i + 1 < len(args):
                out.append(args[i + 1])
                i += 1
            i += 1
            continue
        if alias.takes_value and value is None:
            if i + 1 >= len(args):
                raise DialectError(f"{name} ({alias.origin}) needs a value: {name} VALUE")
            value = args[i + 1]
            i += 1
        elif (
            not alias.takes_value
            and value is None
            and i + 1 < len(args)
            and args[i + 1] in alias.optional_values
        ):
            value = args[i + 1]
            i += 1
        elif not alias.takes_value and value is not None and value not in alias.optional_values:
            raise DialectError(f"{name} ({alias.origin}) takes no value: give {name} alone")
        reading = alias.read(value, given)
        _claim(alias, name, targets, given)
        out += reading.args
        notes.append(note(alias, name if value is None else f"{name} {_short(value)}", reading))
        i += 1
    return out, notes


def _claim(alias: Alias, name: str, targets: dict[str, str], given: Mapping[str, str]) -> None:
    """Record that alias `name` sets its target; DialectError when something else sets it too."""
    if alias.target is None:
        return
    spellings = (alias.target, *_SHORT_FORMS.get(alias.target, ()))
    direct = next((s for s in spellings if s in given), None)
    other = direct or targets.get(alias.target)
    if other is not None:
        raise DialectError(f"{name} ({alias.origin}) and {other} both set {alias.target}: give one of them")
    targets[alias.target] = name


def read_config_value(command: str, alias: Alias, key: str, value: Any, given: Mapping[str, str]) -> Reading:
    """What config-file key `key` of `command` (an alias) set to `value` (as TOML or YAML typed it) reads as:
    a flag alias takes true or false (false: its `--no-` alias where there is one, else nothing),
    any other alias the text of its value (a YAML mapping as JSON, for --kv-transfer-config)."""
    if alias.takes_value:
        if isinstance(value, bool) or value is None:
            raise DialectError(f"'{key}' ({alias.origin}) takes a value, not {value!r}")
        text = json.dumps(value) if isinstance(value, dict | list) else str(value)
        return alias.read(text, given)
    if not isinstance(value, bool):
        raise DialectError(f"'{key}' ({alias.origin}) must be true or false, got {value!r}")
    if value:
        return alias.read(None, given)
    off = alias_for("--no-" + alias.names[0].lstrip("-"), command)
    if off is not None:
        return off.read(None, given)
    return Reading((), "false is what kvspill does anyway")


class DialectCommand(typer.core.TyperCommand):
    """A typer command that reads the aliases of `ALIASES` for its own name before click parses."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        value_options = frozenset(
            name
            for param in self.params
            if getattr(param, "param_type_name", "") == "option" and not getattr(param, "is_flag", False)
            for name in param.opts
        )
        try:
            args, notes = rewrite_args(self.name or "", args, value_options)
        except PrintAndExit as e:
            typer.echo(e.text)
            raise typer.Exit(0) from e
        except DialectError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from e
        if not ctx.resilient_parsing:
            for text in notes:
                typer.echo(f"note: {text}", err=True)
        return super().parse_args(ctx, args)
