"""`kvspill monitor`: live VRAM, host memory and KV-tier view.

Layers, bottom up: `snapshot` (dataclasses), `gpu`/`host`/`server` (sources), `sampler` (one
refresh), `alerts` (hysteresis and session statistics), `log` (CSV / JSON lines), `render`
(rich), `session` (one refresh end to end). The CLI (`kvspill/cli/monitor_cmd.py`) owns the
clock and the terminal.

Invariants: never imports torch (GPUs are read through NVML, imported lazily); runs without a
GPU, NVML or a server and says which is missing.
"""

from __future__ import annotations
