"""`--config FILE` (or `KVSPILL_CONFIG`): a TOML file holding any flag of `kvspill serve`, or a
`.yaml`/`.yml` file in vLLM's form (the same keys: flag names, and `model`).

    # serve.toml
    model = "/models/Llama-3.1-8B-Instruct-Q4_K_M.gguf"
    host = "0.0.0.0"
    vram-budget = "24GiB"
    cpu-kv-budget = "40GiB"
    enforce-eager = true

Invariants:
- Precedence: command line > `KVSPILL_<FLAG>` > the file > the default. The file fills click's
  `default_map`, which click reads only for a flag given neither on the command line nor in the
  environment: one rule, click's own, for every flag, with no copy of the flag list here.
- Keys are the flag names without `--` (`vram-budget`; `vram_budget` reads the same), and `model`
  for the MODEL argument. An unknown key (named with the valid ones), a value of the wrong TOML type,
  a file that is missing or not TOML (YAML): one `error:` line naming the file, exit 2. Nothing is
  ignored.
- Other servers' flag names (`swap-space`, `context-length`, `ctx-size`, ...) are keys too: they go
  through the same alias table as the command line (`cli/dialects.py`), each printing its `note:`.
- `--print-config` writes the effective values with where each came from, as TOML that is itself a
  valid config file (the API key stays hidden: it is printed as a comment).
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import typer
import yaml

from kvspill.cli.dialects import DialectError, alias_for, note, read_config_value
from kvspill.errors import KvspillError

CONFIG_ENV = "KVSPILL_CONFIG"
_META_KEY = "kvspill.config_file"
_NOT_IN_FILE = {"config_file", "print_config"}  # about the file itself, not settings
_DEFAULT_IN_HELP = re.compile(r"\(default: (.*)\)\.?\s*$", re.DOTALL)


class ConfigFileError(KvspillError):
    """A config file that cannot be used; the message says what to change."""


def _key(param: Any) -> str:
    return str(param.name).replace("_", "-")


def _settable(command: Any) -> dict[str, Any]:
    """The params of (typer's click) `command` a file may set, by key."""
    return {_key(p): p for p in command.params if p.name and p.name not in _NOT_IN_FILE}


def _type_error(value: Any, param: Any) -> str | None:
    """Why `value` (as TOML read it) cannot be `param`'s, or None. Strict: the command line would
    take 2.5 as 2 for an integer flag and "yes" as true; a file says exactly what it means."""
    kind = param.type_descriptor.annotation  # the Python type typer converts to (typer >= 0.29)
    if kind is bool:
        return None if isinstance(value, bool) else "true or false"
    if isinstance(value, bool):
        return "a number" if kind in (int, float) else "a string"
    if kind is int:
        return None if isinstance(value, int) else "an integer"
    if kind is float:
        return None if isinstance(value, int | float) else "a number"
    if isinstance(value, int) and not isinstance(value, bool):
        return None  # a token count flag (`max-model-len = 32768`) reads an integer as its text
    return None if isinstance(value, str) else 'a string (in quotes, e.g. "24GiB")'


def _load(path: Path) -> dict[str, Any]:
    """The file's table: YAML for a .yaml/.yml file (vLLM's form), else TOML."""
    is_yaml = path.suffix.lower() in (".yaml", ".yml")
    try:
        if is_yaml:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        else:
            with path.open("rb") as f:
                data = tomllib.load(f)
    except FileNotFoundError as e:
        raise ConfigFileError(f"config file {path}: no such file (--config / {CONFIG_ENV})") from e
    except OSError as e:
        raise ConfigFileError(f"config file {path}: cannot read it: {e.strerror or e}") from e
    except (tomllib.TOMLDecodeError, yaml.YAMLError, UnicodeDecodeError) as e:
        why = _yaml_problem(e) if isinstance(e, yaml.YAMLError) else str(e)
        raise ConfigFileError(
            f"config file {path} is not valid {'YAML' if is_yaml else 'TOML'}: {why}"
        ) from e
    if data is None:  # an empty YAML file
        return {}
    if not isinstance(data, dict):
        raise ConfigFileError(f"config file {path}: the top level must be a mapping of flag names to values")
    return data


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error on one line (its own text spans several, quoting the file)."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or " ".join(str(e).split())
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else problem


def read_config_file(path: Path, command: Any) -> dict[str, Any]:
    """The `default_map` of `command` that file `path` sets (param name -> value); raises
    ConfigFileError saying what to change."""
    return read_config(path, command)[0]


def read_config(path: Path, command: Any) -> tuple[dict[str, Any], list[str]]:
    """(the `default_map` of `command` that file `path` sets, the notes of its aliased keys)."""
    data = _load(path)
    settable = _settable(command)
    given = {"--" + str(k).replace("_", "-"): str(v) for k, v in data.items()}
    defaults: dict[str, Any] = {}
    set_by: dict[str, str] = {}  # param name -> the key that set it
    notes: list[str] = []
    for raw_key, value in data.items():
        raw_key = str(raw_key)
        key = raw_key.replace("_", "-")
        alias = None if key in settable else alias_for(key, str(command.name))
        if alias is not None and alias.in_files:
            try:
                reading = read_config_value(str(command.name), alias, raw_key, value, given)
            except DialectError as e:
                raise ConfigFileError(f"config file {path}: {e}") from e
            shown = value if isinstance(value, str) else json.dumps(value)  # YAML's spelling: true, not True
            notes.append(note(alias, f"{raw_key}: {shown}", reading))
            for flag, text in zip(reading.args[::2], reading.args[1::2], strict=True):
                target = settable[flag[2:]]
                _set(path, defaults, set_by, target, _typed(path, raw_key, text, target), raw_key)
            continue
        param = settable.get(key)
        if param is None:
            near = difflib.get_close_matches(key, list(settable), n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            raise ConfigFileError(
                f"config file {path}: unknown key '{raw_key}'{hint}; valid keys: {', '.join(sorted(settable))}"
            )
        wanted = _type_error(value, param)
        if wanted is not None:
            raise ConfigFileError(f"config file {path}: '{raw_key}' must be {wanted}, got {value!r}")
        _set(path, defaults, set_by, param, value, raw_key)
    return defaults, notes


def _typed(path: Path, key: str, text: str, param: Any) -> Any:
    """An alias's value text as `param`'s type, so that a bad one is this file's one line."""
    kind = param.type_descriptor.annotation
    try:
        return int(text) if kind is int else float(text) if kind is float else text
    except ValueError as e:
        wanted = "an integer" if kind is int else "a number"
        raise ConfigFileError(f"config file {path}: '{key}' must be {wanted}, got {text!r}") from e


def _set(
    path: Path, defaults: dict[str, Any], set_by: dict[str, str], param: Any, value: Any, key: str
) -> None:
    """`defaults[param] = value` as set by `key`; a second key for the same flag is an error."""
    first = set_by.get(param.name)
    if first is not None and first.replace("_", "-") == key.replace("_", "-"):
        raise ConfigFileError(f"config file {path}: '{_key(param)}' is set twice (as - and _ spellings)")
    if first is not None:
        raise ConfigFileError(f"config file {path}: '{first}' and '{key}' both set {_key(param)}: keep one")
    defaults[param.name] = value
    set_by[param.name] = key


def _load_into_context(ctx: typer.Context, value: Path | None) -> Path | None:
    """Eager callback of `--config`: runs before the other flags are read, so that the file's
    values are there for click to fall back on."""
    if value is None or ctx.resilient_parsing:
        return value
    try:
        defaults, notes = read_config(value, ctx.command)
    except ConfigFileError as e:
        typer.echo(f"error: {e}", err=True)  # the house's one line, not click's usage box
        raise typer.Exit(2) from e
    for text in notes:
        typer.echo(f"note: config file {value}: {text}", err=True)
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    ctx.meta[_META_KEY] = value
    return value


def config_option() -> Any:
    """The typer option of `--config FILE` (also `KVSPILL_CONFIG`)."""
    return typer.Option(
        "--config",
        help='TOML file of flag values (keys as the flags without --, e.g. vram-budget = "24GiB"), or '
        "a .yaml file in vLLM's form (other servers' flag names read as in docs/flags.md, Aliases); "
        "the command line and KVSPILL_<FLAG> win over it.",
        envvar=CONFIG_ENV,
        is_eager=True,
        callback=_load_into_context,
        dir_okay=False,
    )


def print_config_option() -> Any:
    """The typer option of `--print-config`."""
    return typer.Option(
        "--print-config",
        help="Print the effective configuration (TOML, with where each value came from) and exit.",
    )


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)  # a JSON string is a TOML basic string


def _source(ctx: typer.Context, param: Any) -> str:
    source = ctx.get_parameter_source(param.name)
    name = source.name if source is not None else "DEFAULT"
    if name == "COMMANDLINE":
        return "command line"
    if name == "ENVIRONMENT":
        return f"environment {param.envvar}"
    if name == "DEFAULT_MAP":
        return f"config file {ctx.meta.get(_META_KEY)}"
    return "default"


def _default_text(param: Any) -> str:
    found = _DEFAULT_IN_HELP.search(getattr(param, "help", None) or "")
    return " ".join(found.group(1).split()) if found else "not set"


def format_effective_config(ctx: typer.Context) -> str:
    """Every settable flag of `ctx`'s command: its value and where it came from, as TOML. A flag
    left unset (its default decided later, by EngineConfig) is a comment quoting that default."""
    lines = [f"# kvspill {ctx.info_name}: effective configuration (a valid --config file)"]
    config_path = ctx.meta.get(_META_KEY)
    if config_path is not None:
        lines.append(f"# config file: {config_path}")
    for key, param in _settable(ctx.command).items():
        value = ctx.params.get(param.name)
        source = _source(ctx, param)
        if value is None:
            lines.append(f"# {key} = ({_default_text(param)})  # {source}")
        elif str(param.name).endswith("_key"):
            lines.append(f"# {key} = (set, not shown)  # {source}")
        else:
            lines.append(f"{key} = {_toml_value(value)}  # {source}")
    return "\n".join(lines)
