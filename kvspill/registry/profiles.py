"""A serving profile is the engine flags of `kvspill serve` it maps to, checked before saving.

Invariants:
- Keys are `EngineOptions` field names (`vram_budget`, `max_model_len`, `cpu_offload_gb`, ...):
  a profile can hold exactly what the engine flags can say, and a flag added to
  `kvspill/options.py` is a profile key with no change here.
- `validate_flags` coerces text (from a form or the CLI) to each flag's type and runs the checks
  `kvspill serve` runs before it loads anything: the same parsing, `EngineConfig`, the budget flags
  against this host (`engine/host_budgets.py`, as `cli/serve_checks.py` calls it) and the device
  checks the engine would fail on at load, so a saved profile starts on this host.
- Flags given on the command line win over the profile's (`apply_profile`).
- A model with no profile of its own starts with `default_profile`: `NAME-default`, no flags
  (serve's defaults), saved like any other so it shows and can be edited.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, get_args, get_type_hints

from kvspill.config import EngineConfig
from kvspill.engine.host_budgets import check_budgets
from kvspill.errors import KvspillError
from kvspill.options import EngineOptions, engine_config, flag_name
from kvspill.registry.store import Profile, Registry, RegistryError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _flag_types() -> dict[str, type]:
    hints = get_type_hints(EngineOptions)
    out = {}
    for name, hint in hints.items():
        args = (
            [a for a in get_args(hint) if a is not type(None)]
            if isinstance(hint, types.UnionType)
            else [hint]
        )
        out[name] = args[0]
    return out


def _coerce(name: str, value: Any, kind: type) -> Any:
    flag = flag_name(name)
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE | _FALSE:
            return text in _TRUE
        raise RegistryError(f"{flag} takes true or false, not {value!r}")
    if isinstance(value, bool):
        raise RegistryError(f"{flag} takes a {kind.__name__}, not {value!r}")
    try:
        return kind(value)
    except (TypeError, ValueError) as e:
        raise RegistryError(f"{flag} takes a {kind.__name__}, not {value!r}") from e


def validate_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """The flags, typed and checked like the command line's; empty values are dropped."""
    kinds = _flag_types()
    unknown = sorted(set(flags) - set(kinds))
    if unknown:
        raise RegistryError(
            f"not engine flags: {', '.join(unknown)}; a profile takes {', '.join(sorted(kinds))}"
        )
    typed = {k: _coerce(k, v, kinds[k]) for k, v in flags.items() if v is not None and v != ""}
    try:
        config = engine_config(EngineOptions(**typed))
        check_budgets(config)
        _check_device(config)
    except KvspillError as e:
        raise RegistryError(f"the profile's flags are not valid: {e}") from e
    return typed


def _check_device(config: EngineConfig) -> None:
    """What the engine refuses only when it loads (engine/setup.py), said at save time instead: a
    profile saved with it failed every start and the manager restarted it (issue 53)."""
    if config.cpu_offload_gb and config.device == "cpu":
        raise KvspillError(
            "--cpu-offload-gb moves weights off a CUDA GPU; on the CPU they are in RAM already: "
            "drop cpu_offload_gb or pick device cuda"
        )


def default_profile(registry: Registry, model_name: str) -> Profile:
    """The model's default profile (`NAME-default`, serve's defaults), saved on first use."""
    registry.model(model_name)
    name = f"{model_name}-default"
    found = next((p for p in registry.profiles(model_name) if p.name == name), None)
    return found if found is not None else registry.save_profile(name, model_name, {})


def serve_args(flags: dict[str, Any]) -> list[str]:
    """The `kvspill serve` command-line arguments of these flags."""
    args: list[str] = []
    for name, value in sorted(flags.items()):
        if isinstance(value, bool):
            args.append(flag_name(name) if value else "--no-" + flag_name(name)[2:])
        else:
            args += [flag_name(name), str(value)]
    return args


def apply_profile(
    registry: Registry, profile_name: str, model: str | None, engine: EngineOptions
) -> tuple[str, EngineOptions, Profile]:
    """(model source, engine options) of `profile_name` with the command line's choices on top."""
    profile = registry.profile(profile_name)
    merged = {**validate_flags(profile.flags), **engine.given()}
    source = model if model is not None else registry.model(profile.model_name).source
    return source, dataclasses.replace(EngineOptions(), **merged), profile


def resolve_serve_profile(
    profile_name: str, model: str | None, engine: EngineOptions
) -> tuple[str, EngineOptions, str]:
    """`kvspill serve --profile NAME`: (model source, engine options, served model name) from the
    registry in `KVSPILL_DATA_DIR` (or the user data dir)."""
    from kvspill.registry.store import open_registry

    registry = open_registry()
    try:
        source, options, profile = apply_profile(registry, profile_name, model, engine)
    finally:
        registry.close()
    return source, options, profile.model_name if model is None else source
