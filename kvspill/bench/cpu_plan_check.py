"""Does the plan tell the truth on this CPU? The embedded model's decode, measured, beside the
figure `kvspill plan` gives for it.

    python -m kvspill.bench.cpu_plan_check                 # at the plan's context (the model's 8K)
    python -m kvspill.bench.cpu_plan_check --context 1024  # quicker: the plan at that context

Runs the embedded SmolLM2-135M on `--device cpu` over a prompt of `--context` tokens (Python's
own stdlib sources), `--new-tokens` greedy tokens with EOS ignored, and prints one JSON line: the
measured decode tok/s ((tokens - 1) / (time after the first token)) and time to the first token,
the plan's figures for the same context (`plan/flag_plans.py`, the `yours` column, as
`kvspill plan` prints them), their ratios, the rates' source and the load average around the run.
On a shared host another job's threads slow every step (the engine's threads wait on the busy
cores), so decode is also timed per window of `--window` tokens with the share of the cores the
other processes used meanwhile; `quiet_windows_decode_tok_s` is the median of the windows where
they used under QUIET_SHARE, the figure the plan (made from rates timed on an idle host) predicts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sysconfig
import time
from pathlib import Path
from typing import Any

from kvspill.llm import LLM
from kvspill.plan.flag_plans import plans_for_flags
from kvspill.sampling_params import SamplingParams

STDLIB_SOURCES = ("argparse.py", "textwrap.py", "typing.py", "inspect.py", "dataclasses.py")
# A window counts as quiet when the other processes used less than this share of the cores
QUIET_SHARE = 0.1


def plan_figures(context: int | None) -> dict[str, Any]:
    """`kvspill plan`'s figures for the embedded model (no flags; `--max-model-len` when `context`)."""
    _, plans, _ = plans_for_flags(None, {} if context is None else {"max_model_len": context})
    plan = plans["yours"]
    return {
        "context": plan.context_len,
        "plan_decode_tok_s": plan.decode_tok_s,
        "plan_ttft_s": plan.ttft_s,
        "plan_device": plan.request.device,
        "rates_source": plan.bandwidths.source,
    }


def _cpu_seconds() -> tuple[float, float]:
    """(CPU seconds every process used, CPU seconds this process used) since boot / its start."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(ticks) - ticks[3] - ticks[4]  # all but idle and iowait
    own = os.times()
    return busy / os.sysconf("SC_CLK_TCK"), own.user + own.system


def _windows(stamps: list[tuple[float, float, float]], size: int) -> list[dict[str, float]]:
    """Decode tok/s per window of `size` tokens, and the share of the cores other processes used
    meanwhile (a shared host: another job's threads slow every step of the engine's)."""
    rows = []
    for i in range(0, len(stamps) - size, size):
        (t0, busy0, own0), (t1, busy1, own1) = stamps[i], stamps[i + size]
        others = max(0.0, (busy1 - busy0) - (own1 - own0)) / ((t1 - t0) * (os.cpu_count() or 1))
        rows.append({"tok_s": size / (t1 - t0), "others_cpu_share": others})
    return rows


def measure_decode(prompt_tokens: int, new_tokens: int, window: int) -> dict[str, Any]:
    """The engine on the CPU: time to the first token, then decode tok/s after `prompt_tokens`:
    over all the new tokens, and per window of `window` tokens with the other processes' share."""
    llm = LLM(None, device="cpu", max_model_len=prompt_tokens + new_tokens, enable_prefix_caching=False)
    lib = Path(sysconfig.get_paths()["stdlib"])
    ids = llm.engine.encode("\n".join((lib / name).read_text() for name in STDLIB_SOURCES))
    if len(ids) < prompt_tokens:
        raise SystemExit(f"the prompt text has {len(ids)} tokens: give --context {len(ids)} or less")
    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)
    start = time.perf_counter()
    llm.engine.add_request(ids[:prompt_tokens], params)
    stamps: list[tuple[float, float, float]] = []  # (time, all processes' CPU s, this one's) per token
    while llm.engine.has_unfinished_requests():
        for out in llm.engine.step():
            stamps.extend((time.perf_counter(), *_cpu_seconds()) for _ in out.delta_token_ids)
    windows = _windows(stamps, window)
    quiet = [w["tok_s"] for w in windows if w["others_cpu_share"] < QUIET_SHARE]
    return {
        "measured_ttft_s": stamps[0][0] - start,
        "measured_decode_tok_s": (len(stamps) - 1) / (stamps[-1][0] - stamps[0][0]),
        "quiet_windows_decode_tok_s": statistics.median(quiet) if quiet else None,
        "windows": windows,
        "new_tokens": len(stamps),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--context", type=int, help="prompt tokens (default: the plan's, the model's context)")
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--window", type=int, default=16, help="tokens per decode window")
    ap.add_argument("--out", help="also append the JSON line to this file")
    args = ap.parse_args(argv)
    planned = plan_figures(args.context)  # first: a first use measures the CPU before the engine loads
    # the plan's decode figure is at `context` tokens of KV: the prompt leaves room for the new tokens
    load_before = os.getloadavg()[0]
    measured = measure_decode(planned["context"] - args.new_tokens, args.new_tokens, args.window)
    quiet = measured["quiet_windows_decode_tok_s"]
    row = {
        **planned,
        **measured,
        "decode_ratio_plan_over_measured": planned["plan_decode_tok_s"] / measured["measured_decode_tok_s"],
        "decode_ratio_plan_over_quiet_windows": planned["plan_decode_tok_s"] / quiet if quiet else None,
        "ttft_ratio_plan_over_measured": planned["plan_ttft_s"] / measured["measured_ttft_s"],
        "load_average_before_after": [load_before, os.getloadavg()[0]],
        "cpu_cores": os.cpu_count(),
    }
    line = json.dumps(row, default=float)
    print(line, flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
