"""Byte sizes as people write them on a command line, and back.

`parse_bytes` reads `16GiB`, `24G`, `512MiB`, `1.5TB`, `1024`. Binary units: `KiB MiB GiB TiB`
and the bare letters `K M G T` (as docker and `ls -h` use them: a "24G" card holds 24 GiB).
Decimal units: `KB MB GB TB` (10**3 ...). Case does not matter; bits are not a thing here.

Invariants: pure functions, no I/O; every bad input raises `InvalidParameterError` naming the flag.
"""

from __future__ import annotations

import math
import re

from kvspill.errors import InvalidParameterError

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40

_UNITS = {
    "": 1,
    "b": 1,
    "k": KiB,
    "kib": KiB,
    "ki": KiB,
    "kb": 10**3,
    "m": MiB,
    "mib": MiB,
    "mi": MiB,
    "mb": 10**6,
    "g": GiB,
    "gib": GiB,
    "gi": GiB,
    "gb": 10**9,
    "t": TiB,
    "tib": TiB,
    "ti": TiB,
    "tb": 10**12,
}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_bytes(text: str | int, param: str = "bytes", *, unit_required: bool = False) -> int:
    """Parse a byte size such as `16GiB`, `24G`, `512MiB`, `1.5TB` or `1024` into an int
    (`unit_required`: only how the error reads, for `parse_size`'s callers)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise InvalidParameterError(param, f"{param} must not be negative, got {text}")
        return text
    match = _PATTERN.match(str(text))
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        how = "a number and a unit" if unit_required else "a number with an optional unit"
        raise InvalidParameterError(
            param,
            f"{param}: cannot read {text!r} as a size; write {how}, "
            "e.g. 16GiB, 24G (= GiB), 512MiB, 1.5TB (= 10**12)" + ("" if unit_required else ", 1024"),
        )
    value = float(match.group(1)) * _UNITS[unit]
    if not math.isfinite(value):
        raise InvalidParameterError(param, f"{param}: {text!r} is too large")
    return int(round(value))


def parse_size(text: str | int, param: str = "bytes") -> int:
    """`parse_bytes` for flags people type: a number without a unit is refused with the choices
    (`--vram-budget 16` meant 16 bytes, which nobody means); 0 is 0 in any unit (`--cpu-kv-budget
    0`: no cpu tier). An int from code is bytes."""
    if isinstance(text, str):
        match = _PATTERN.match(text)
        if match is not None and match.group(2) == "" and float(match.group(1)) != 0:
            number = match.group(1)
            raise InvalidParameterError(
                param,
                f"{param}: {text!r} has no unit: write {number}GiB (binary: 2**30 bytes), "
                f"{number}GB (10**9 bytes) or {number}MiB; {number}B for bytes",
            )
    return parse_bytes(text, param, unit_required=True)


def format_bytes(num_bytes: int | float) -> str:
    """Human form with binary units: `16.0 GiB`, `512 MiB`, `23 KiB`."""
    value = float(num_bytes)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if value >= size:
            shown = value / size
            return f"{sign}{shown:.1f} {unit}" if shown < 100 else f"{sign}{shown:.0f} {unit}"
    return f"{sign}{value:.0f} B"


def format_tokens(num_tokens: int) -> str:
    """Token counts as people say them: `131072` -> `128K`, `1048576` -> `1M`, `3000` -> `2.9K`."""
    if num_tokens >= 1 << 20:
        value, unit = num_tokens / (1 << 20), "M"
    elif num_tokens >= 1 << 10:
        value, unit = num_tokens / (1 << 10), "K"
    else:
        return str(num_tokens)
    return f"{value:.0f}{unit}" if value == int(value) or value >= 100 else f"{value:.1f}{unit}"


def parse_tokens(text: str | int, param: str = "context") -> int:
    """Parse a token count: `131072`, `128K` (= 131072), `1M` (= 1048576)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    match = re.match(r"^\s*([0-9]*\.?[0-9]+)\s*([kKmM]?)\s*$", str(text))
    if match is None:
        raise InvalidParameterError(
            param, f"{param}: cannot read {text!r} as a token count; e.g. 131072, 128K, 1M"
        )
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20}[match.group(2).lower()]
    return int(round(float(match.group(1)) * scale))
