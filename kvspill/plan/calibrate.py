"""The saved calibration: where the bandwidths measured by `kvspill doctor --calibrate`
(`hardware/calibrate.py`) are kept, and reading them back for the planner and the engine.

Invariants:
- The saved file is JSON with one key per `Bandwidths` field; its path comes from `env.py`.
- Loading a calibration does not import torch (`kvspill plan` stays quick); a corrupt file is an
  error that says how to fix it, a missing one is None.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, fields
from pathlib import Path

from kvspill.env import env_settings
from kvspill.errors import InvalidParameterError
from kvspill.plan.bandwidths import RATE_FIELDS, Bandwidths

CALIBRATION_VERSION = 1
# Fields that describe a plan's use of the rates, not a measurement: never saved, never read.
_NOT_SAVED = ("source", "device", "filled")


def save_calibration(bandwidths: Bandwidths, path: str | os.PathLike[str] | None = None) -> Path:
    """Write `bandwidths` as JSON (default path: KVSPILL_CALIBRATION or ~/.cache/kvspill/...)."""
    target = Path(path) if path is not None else env_settings().calibration_path
    target.parent.mkdir(parents=True, exist_ok=True)
    data = {"version": CALIBRATION_VERSION, **asdict(bandwidths)}
    for planning_only in _NOT_SAVED:
        data.pop(planning_only)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(target)  # atomic: a reader never sees half a file
    return target


def load_calibration(path: str | os.PathLike[str] | None = None) -> Bandwidths | None:
    """Read a saved calibration; None when there is none. A corrupt file is an error that says so."""
    source = Path(path) if path is not None else env_settings().calibration_path
    if not source.is_file():
        return None

    def bad(why: str) -> InvalidParameterError:
        return InvalidParameterError(
            "calibration", f"calibration file {source} {why}: rerun `kvspill doctor --calibrate` or delete it"
        )

    try:
        data = json.loads(source.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise bad(f"cannot be read ({e})") from e
    if not isinstance(data, dict) or data.get("version") != CALIBRATION_VERSION:
        raise bad(f"is not a version {CALIBRATION_VERSION} calibration")
    known = {f.name for f in fields(Bandwidths)} - set(_NOT_SAVED)
    values = {k: v for k, v in data.items() if k in known}
    for name in (*RATE_FIELDS, "cpu_tflops", "cpu_gemv_gbs", "cpu_gemm_tflops", "cpu_kv_gbs"):
        value = values.get(name)
        if value is not None and (not isinstance(value, (int, float)) or value <= 0):
            raise bad(f"has an invalid {name}: {value!r}")
    for name in ("cpu_attn_layer_s", "cpu_layer_s"):
        layer_s = values.get(name)
        if layer_s is not None and (not isinstance(layer_s, (int, float)) or layer_s < 0):
            raise bad(f"has an invalid {name}: {layer_s!r}")
    if values.get("cpu_dtype") not in (None, "float16", "float32", "bfloat16"):
        raise bad(f"has an invalid cpu_dtype: {values['cpu_dtype']!r}")
    date = values.get("measured_at") or "undated"
    return Bandwidths(**values, source=f"calibration {source} {date}")
