"""`python -m kvspill.bench --fill-only-prefill`: decode speed and memory at a long context without
paying for its prefill's attention.

W3 at 1M tokens prefills in ~1,340 s on an H200, nearly all of it attention (each 16K-token chunk
attends every earlier token, most of them cold). That is more than two device calls, and two
sessions lost the machine between calls before the first token. With this flag the prefill chunks
run the model as usual and store their K and V in the paged pool. The tiers spill them as usual,
but the chunks skip attention (their attention output is zero: `ModelRunner.skip_prefill_attention`).
The KV therefore has the real shape, count and tiers: random weights and random tokens make its
values as meaningless as ever. Decode steps then attend all of it exactly as in a real run.

What a row with this flag measures: decode tok/s, the plan's decode figure beside it, the
allocator's and the card's memory. What it does not: TTFT and the prefill's own memory peak. The
row says so (`prefill_attention: "skipped"`, every TTFT field null), and its mode ends in
`-fillonly`.
"""

from __future__ import annotations

import argparse
from typing import Any

from kvspill.engine.core import LLMEngine


def add_flag(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--fill-only-prefill",
        action="store_true",
        help="prefill stores K/V but skips attention: decode and memory at the context, no TTFT",
    )


def apply(engine: LLMEngine) -> None:
    """Make the engine's prefill chunks skip attention (one process: the runner is here)."""
    if engine.parallel is not None:
        raise SystemExit(
            "--fill-only-prefill runs on one GPU (the runners of other ranks are other processes)"
        )
    engine.bundle.runner.skip_prefill_attention = True


def mark(rec: dict[str, Any]) -> None:
    """A row measured with the flag: no TTFT figure, and the reason."""
    for key in rec:
        if "ttft" in key:
            rec[key] = None
    rec["prefill_attention"] = "skipped"
