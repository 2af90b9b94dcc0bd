"""The sampling values a model's makers recommend, used for what a request leaves out.

Where they come from (`--generation-config`, EngineConfig.generation_config):
- "auto" (the default): a model directory's generation_config.json (`temperature`, `top_p`,
  `top_k`, `min_p`, `repetition_penalty`: the keys vLLM's `--generation-config auto` reads, less
  `max_new_tokens`), or a GGUF file's `general.sampling.*` metadata (`temp`, `top_k`, `top_p`,
  `min_p`, `penalty_repeat`: what llama.cpp reads);
- a folder: its generation_config.json, for any model;
- "none" (or "vllm", vLLM's spelling): nothing, so OpenAI's defaults (temperature 1, top_p 1).

Why: vLLM, llama.cpp and Ollama sample with the model's recommended values when a client sends
none (Llama-3.1-Instruct: temperature 0.6, top_p 0.9; Qwen2.5: 0.7, 0.8, top_k 20, repetition
1.05), and most OpenAI clients send none; at temperature 1 with no top-p a small model's answers
wander (the embedded SmolLM2 sets none, so it keeps OpenAI's defaults).

Invariants: only keys the source sets are returned; a value SamplingParams would refuse is left
out with a warning (a model file never makes requests fail); `do_sample` is ignored, as vLLM does.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from kvspill.config import GENERATION_CONFIGS_OFF
from kvspill.errors import InvalidParameterError
from kvspill.model.resolve import ResolvedModel
from kvspill.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

# SamplingParams fields a model may recommend, named alike in generation_config.json
_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
# SamplingParams field <- GGUF metadata key
_GGUF_KEYS = {
    "temperature": "general.sampling.temp",
    "top_p": "general.sampling.top_p",
    "top_k": "general.sampling.top_k",
    "min_p": "general.sampling.min_p",
    "repetition_penalty": "general.sampling.penalty_repeat",
}


def model_sampling_defaults(resolved: ResolvedModel | None, source: str = "auto") -> dict[str, float | int]:
    """The recommended values of `resolved` per `source` (see the module docstring), by
    SamplingParams field name; {} where there are none. `resolved` None: a model without files."""
    if source in GENERATION_CONFIGS_OFF:
        return {}
    if source != "auto":
        return _valid(_from_json(Path(source) / "generation_config.json"), f"{source}/generation_config.json")
    if resolved is None:
        return {}
    if resolved.kind == "gguf":
        return _valid(_from_gguf(resolved.path), f"{resolved.path.name} (general.sampling.*)")
    return _valid(_from_json(resolved.path / "generation_config.json"), "generation_config.json")


def describe(defaults: dict[str, float | int]) -> str:
    """`temperature=0.6, top_p=0.9` for the start-up log."""
    return ", ".join(f"{name}={value}" for name, value in defaults.items())


def _from_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        logger.warning("%s is not readable JSON (%s): no sampling defaults from it", path, e)
        return {}
    if not isinstance(data, dict):
        return {}
    return {name: data[name] for name in _FIELDS if data.get(name) is not None}


def _from_gguf(path: Path) -> dict[str, Any]:
    from kvspill.gguf.reader import read_gguf

    try:
        reader = read_gguf(path)
    except (OSError, ValueError):
        return {}  # the weights' loader says what is wrong with the file
    values = {}
    for name, key in _GGUF_KEYS.items():
        field = reader.get_field(key)
        if field is not None:
            values[name] = field.contents()
    return values


def _valid(values: dict[str, Any], source: str) -> dict[str, float | int]:
    """The values SamplingParams takes, in their types; each other one is logged and dropped."""
    kept: dict[str, float | int] = {}
    for name, value in values.items():
        typed = _typed(name, value)
        try:
            if typed is None:
                raise InvalidParameterError(name, f"expected a number, got {value!r}")
            probe: dict[str, Any] = {name: typed}
            SamplingParams(**probe)
        except InvalidParameterError as e:
            logger.warning("%s: %s is left out of the sampling defaults: %s", source, name, e)
            continue
        kept[name] = typed
    return kept


def _typed(name: str, value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if name == "top_k":
        return int(value) if float(value).is_integer() else None
    return float(value)
