"""Contexts to sweep and the named engine configurations that `bench compare` lays side by side.

Named configurations (`CONFIGS`) change memory knobs only; every other engine flag stays the
user's. `default`, `extended` and `extreme` are the engine's --mode (kvspill/modes.py) at the
run's largest context (prompt + new tokens): the engine sizes their tiers on this host, as
`kvspill plan` shows them.

Invariants:
- Bad input raises `InvalidParameterError` naming the flag and what to change: an empty or
  unsorted-duplicate context list, a context that with its new tokens passes the model's length,
  an unknown or empty configuration list.
- `tier_cap_bytes` bounds the cpu and disk tiers of every configuration (a mode on a big host
  asks for half its RAM, pinned and zeroed at start-up: too much for a test or a shared host).
- `weights-offload` is the engine's own `--cpu-offload-gb` (CUDA only: `check_device` refuses it
  off CUDA before any engine starts): the user's amount, else a quarter of the weights;
  `weights-resident` is the same engine with every weight on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kvspill.config import EngineConfig
from kvspill.errors import InvalidParameterError
from kvspill.plan.units import parse_tokens

DEFAULT_START_CONTEXT = 4096

CONFIGS: dict[str, str] = {
    "default": "--mode default: a CPU tier only for what the device cannot hold (kvspill/modes.py)",
    "extended": "--mode extended: CPU tier half the available RAM; disk past RAM; exact",
    "extreme": "--mode extreme: CPU tier 80% of available RAM; disk a quarter of the free disk; sparse",
    "offload-off": "no cold tiers: all KV in the device pool",
    "offload-on": "a CPU tier (--cpu-kv-budget, else enough for the largest context); cold path as configured",
    "cpu-attention": "--attention cpu: the whole KV pool in RAM, attention on the CPU",
    "stream": "CPU tier + --cold-attention stream: cold blocks streamed to the device",
    "cold-cpu": "CPU tier + --cold-attention cpu: cold blocks attended in RAM",
    "weights-resident": "every weight on the GPU (--cpu-offload-gb 0)",
    "weights-offload": "--cpu-offload-gb as given, else a quarter of the weights, in pinned RAM (CUDA)",
}
DEFAULT_CONFIGS = ("default", "extended", "extreme")


def parse_contexts(text: str, param: str = "--contexts") -> list[int]:
    """`4K,8K,16K` -> [4096, 8192, 16384]; ascending, no duplicates, each at least 1."""
    parts = [p for p in (s.strip() for s in text.split(",")) if p]
    if not parts:
        raise InvalidParameterError(param, f"{param} is empty: give token counts such as 4K,8K,16K")
    values = [parse_tokens(p, param) for p in parts]
    if any(v < 1 for v in values):
        raise InvalidParameterError(param, f"{param}: every context must be at least 1 token, got {text!r}")
    if sorted(set(values)) != values:
        raise InvalidParameterError(param, f"{param} must be ascending without repeats, got {text!r}")
    return values


def doubling_contexts(start: int, largest: int) -> list[int]:
    """start, 2*start, 4*start ... up to `largest`, and `largest` itself last (the limit is the point)."""
    if largest < 1:
        raise InvalidParameterError(
            "max_context",
            f"no context fits: the largest is {largest} tokens; lower --new-tokens or raise --max-model-len",
        )
    if start > largest:
        raise InvalidParameterError(
            "start_context",
            f"--start-context {start} is past the largest context "
            f"that fits ({largest}): give --start-context {largest} or less",
        )
    values = []
    ctx = start
    while ctx <= largest:
        values.append(ctx)
        ctx *= 2
    if values[-1] != largest:
        values.append(largest)
    return values


def check_contexts(contexts: list[int], new_tokens: int, max_model_len: int | None) -> None:
    """Every context plus its new tokens must fit the model's length (unknown length: unchecked)."""
    if not contexts:
        raise InvalidParameterError("contexts", "no contexts to run: give --contexts such as 4K,8K")
    if max_model_len is None:
        return
    too_long = [c for c in contexts if c + new_tokens > max_model_len]
    if too_long:
        raise InvalidParameterError(
            "contexts",
            f"context {too_long[0]} + {new_tokens} new tokens passes the model length "
            f"{max_model_len}: keep contexts at or below {max_model_len - new_tokens} (--contexts/--max-context), "
            "lower --new-tokens, or raise --max-model-len",
        )


def parse_config_names(text: str | None) -> list[str]:
    """`default,extended` -> names, checked against `CONFIGS`; None -> the three presets."""
    if text is None:
        return list(DEFAULT_CONFIGS)
    names = [n for n in (s.strip() for s in text.split(",")) if n]
    if not names:
        raise InvalidParameterError("configs", f"--configs is empty: choose from {', '.join(CONFIGS)}")
    for name in names:
        if name not in CONFIGS:
            raise InvalidParameterError(
                "configs", f"unknown configuration {name!r}: choose from {', '.join(CONFIGS)}"
            )
    if len(set(names)) != len(names):
        raise InvalidParameterError("configs", f"--configs names a configuration twice: {text!r}")
    return names


def parse_url_labels(urls: list[str]) -> list[tuple[str, str]]:
    """`label=URL` (or a bare URL, labelled by its position) -> [(label, url)], labels unique."""
    pairs = []
    for i, item in enumerate(urls):
        label, sep, url = item.partition("=")
        if not sep or "://" in label:
            label, url = f"server{i + 1}" if len(urls) > 1 else "server", item
        if not url.startswith(("http://", "https://")):
            raise InvalidParameterError("url", f"--url {item!r}: expected LABEL=http://HOST:PORT")
        pairs.append((label.strip(), url.strip()))
    labels = [label for label, _ in pairs]
    if len(set(labels)) != len(labels):
        raise InvalidParameterError("url", f"--url labels must differ, got {labels}")
    return pairs


@dataclass(frozen=True)
class Sizing:
    """What the named configurations are sized for: the run's largest sequence on this host."""

    max_tokens: int  # largest context + new tokens
    host_ram_bytes: int | None
    disk_free_bytes: int | None
    tier_cap_bytes: int | None = None


def host_sizing(max_tokens: int, tier_cap_bytes: int | None, disk_dir: str | None) -> Sizing:
    """This host's RAM and the free disk where the disk tier would live (as `kvspill plan` reads them)."""
    import tempfile

    import psutil

    try:
        ram = int(psutil.virtual_memory().available)  # what the modes size from (plan/fit.py)
        disk = int(psutil.disk_usage(disk_dir or tempfile.gettempdir()).free)
    except OSError:
        ram, disk = None, None
    return Sizing(max_tokens, ram, disk, tier_cap_bytes)


def mode_of(config: EngineConfig) -> str:
    """A row's `mode` for an engine config, as `python -m kvspill.bench` names them."""
    if config.attention == "cpu":
        return "cpu-attention"
    if config.cpu_kv_budget_bytes or config.disk_kv_budget_bytes:
        return f"tiers-{config.cold_attention}"
    return "device-kv"


def _kv_dtype_bytes(config: EngineConfig) -> int:
    return 4 if config.dtype == "float32" else 2  # auto: bf16 on CUDA, fp16 on the CPU


def _cold_tier_bytes(config: EngineConfig, sizing: Sizing) -> int:
    """The user's --cpu-kv-budget, else enough for one sequence of the largest context."""
    if config.cpu_kv_budget_bytes:
        return config.cpu_kv_budget_bytes
    from kvspill.plan.spec import ModelSpec

    spec = ModelSpec.from_model_arg(config.model)
    blocks = -(-sizing.max_tokens // config.block_size)
    return blocks * config.block_size * spec.kv_bytes_per_token(_kv_dtype_bytes(config))


def _mode_options(name: str, config: EngineConfig, sizing: Sizing, vram_bytes: int) -> dict[str, Any]:
    """--mode `name` at the run's context; with a tier cap, the tiers the mode sizes on this host
    (plan/startup.py, as the engine sizes them), so the cap can bound them."""
    options: dict[str, Any] = {"mode": name}
    if sizing.tier_cap_bytes is None:
        return options
    from kvspill.plan.startup import startup_plan

    moded = replace(config, mode=name, max_model_len=sizing.max_tokens)
    startup = startup_plan(
        moded,
        vram_bytes,
        None,
        device="cuda" if device_plan_bytes(config)[1] else "cpu",
        host_available_bytes=sizing.host_ram_bytes,
        disk_free_bytes=sizing.disk_free_bytes,
    )
    if startup is not None:
        options["cpu_kv_budget_bytes"] = startup.plan.request.ram_budget_bytes
        options["disk_kv_budget_bytes"] = startup.plan.request.disk_budget_bytes
    return options


def _quarter_of_weights_gib(config: EngineConfig) -> float:
    from kvspill.plan import request_from_engine_config
    from kvspill.plan.spec import ModelSpec

    request = request_from_engine_config(config, ModelSpec.from_model_arg(config.model), vram_budget_bytes=1)
    return round(request.stored_weight_bytes / 4 / 2**30, 2)


def config_options(name: str, config: EngineConfig, sizing: Sizing, vram_bytes: int) -> dict[str, Any]:
    """The EngineConfig fields configuration `name` sets over the user's `config`.

    `vram_bytes` is what the modes plan the device for (with --tier-cap): the --vram-budget, the
    card, or (on the CPU, where the device pool is host RAM) a quarter of the available RAM."""
    if name in ("default", "extended", "extreme"):
        options = _mode_options(name, config, sizing, vram_bytes)
    elif name == "offload-off":
        options = {"cpu_kv_budget_bytes": 0, "disk_kv_budget_bytes": 0}
    elif name == "offload-on":
        options = {"cpu_kv_budget_bytes": _cold_tier_bytes(config, sizing)}
    elif name == "cpu-attention":
        options = {"attention": "cpu"}
    elif name == "weights-resident":
        options = {"cpu_offload_gb": 0.0}
    elif name == "weights-offload":
        options = {"cpu_offload_gb": config.cpu_offload_gb or _quarter_of_weights_gib(config)}
    elif name in ("stream", "cold-cpu"):
        options = {
            "cpu_kv_budget_bytes": _cold_tier_bytes(config, sizing),
            "cold_attention": "stream" if name == "stream" else "cpu",
        }
    else:
        raise InvalidParameterError(
            "configs", f"unknown configuration {name!r}: choose from {', '.join(CONFIGS)}"
        )
    if sizing.tier_cap_bytes is not None:
        for key in ("cpu_kv_budget_bytes", "disk_kv_budget_bytes"):
            if key in options:
                options[key] = min(options[key], sizing.tier_cap_bytes)
    return options


CUDA_ONLY = {
    "weights-offload": "--cpu-offload-gb moves weights off a CUDA GPU into pinned RAM; on the CPU every "
    "weight is in RAM already",
}


def check_device(names: list[str], on_cuda: bool) -> None:
    """Refuse, before anything starts, a configuration that only means something on CUDA."""
    for name in names:
        if name in CUDA_ONLY and not on_cuda:
            raise InvalidParameterError(
                "configs",
                f"{name} needs a CUDA device ({CUDA_ONLY[name]}): drop it from --configs, or run on a GPU "
                "(--device cuda)",
            )


def device_plan_bytes(config: EngineConfig) -> tuple[int, bool]:
    """(bytes the presets plan the device for, on CUDA?) for this config's device."""
    import psutil
    import torch

    on_cuda = config.device.startswith("cuda") or (config.device == "auto" and torch.cuda.is_available())
    if config.vram_budget_bytes is not None:
        return config.vram_budget_bytes, on_cuda
    if on_cuda:
        index = int(config.device.partition(":")[2] or 0)
        return int(torch.cuda.get_device_properties(index).total_memory), True
    return int(psutil.virtual_memory().available // 4), False


def plan_max_context(config: EngineConfig) -> int | None:
    """The memory plan's largest sequence (all tiers) for this config on its CUDA card; None on the CPU."""
    import torch

    from kvspill.plan.calibrate import load_calibration
    from kvspill.plan.startup import startup_plan

    vram, on_cuda = device_plan_bytes(config)
    if not on_cuda:
        return None
    index = int(config.device.partition(":")[2] or 0)
    startup = startup_plan(config, vram, torch.cuda.get_device_name(index), load_calibration())
    return None if startup is None else int(startup.plan.max_context)


def contexts_for(
    contexts: list[int] | None,
    start: int,
    max_context: int | None,
    new_tokens: int,
    max_model_len: int | None,
    plan_max: int | None,
) -> list[int]:
    """The contexts to run: `contexts` (parsed --contexts) as given, else doubling from `start` up to
    the largest that fits (the smallest of --max-context, the plan's maximum and the model length,
    less new tokens)."""
    if contexts is not None:
        values = contexts
    else:
        limits = [v - new_tokens for v in (plan_max, max_model_len) if v is not None]
        if max_context is not None:
            limits.append(max_context)
        if not limits:
            raise InvalidParameterError(
                "max_context", "the target does not say its model length: give --contexts or --max-context"
            )
        values = doubling_contexts(start, min(limits))
    check_contexts(values, new_tokens, max_model_len)
    return values
