"""A request's own window on the gpu tier, bounded by the engine's (pure Python).

A request may set `hot_window_tokens` and `num_sink_blocks` (`SamplingParams`; the server's
request fields of the same names). The bound: each at most the engine's own flag
(`--hot-window-tokens`, `--num-sink-blocks`, as `SchedulerConfig` holds them after start-up;
`--attention cpu` makes the hot window one block). The memory plan counts each sequence's hot
set at the engine's window (`plan/arithmetic.py`: whether the gpu tier can spill at all, how many
sequences fit), so a request may keep less of its KV on the gpu (more of it spills, leaving room
to the others) but never more: a wider window could make another request's hot blocks no longer
fit.

Invariants: a field left out takes the engine's value; out of bounds is an `InvalidParameterError`
naming the field, the limit and the flag, raised before the request enters any queue.
"""

from __future__ import annotations

from kvspill.errors import InvalidParameterError
from kvspill.kv.tier_spill import KVWindow
from kvspill.sampling_params import SamplingParams
from kvspill.scheduler.config import SchedulerConfig


def request_window(params: SamplingParams, config: SchedulerConfig) -> KVWindow | None:
    """The request's own window, or None when it asks for none (the engine's applies)."""
    if params.hot_window_tokens is None and params.num_sink_blocks is None:
        return None
    for name, value, limit, flag in (
        ("hot_window_tokens", params.hot_window_tokens, config.hot_window_tokens, "--hot-window-tokens"),
        ("num_sink_blocks", params.num_sink_blocks, config.num_sink_blocks, "--num-sink-blocks"),
    ):
        if value is not None and value > limit:
            raise InvalidParameterError(
                name,
                f"{name}: at most {limit} on this server (its {flag}), got {value}: ask for at "
                f"most {limit}, or restart the server with a larger {flag}",
            )
    return KVWindow(
        num_sink_blocks=config.num_sink_blocks if params.num_sink_blocks is None else params.num_sink_blocks,
        hot_window_tokens=(
            config.hot_window_tokens if params.hot_window_tokens is None else params.hot_window_tokens
        ),
    )
