"""`kvspill eval`'s progress: a numbered line before each task batch (and its score after), in
order, through the `log` the CLI sends to stderr; no engine (a fake LLM answers)."""

from __future__ import annotations

import re
from types import SimpleNamespace

from kvspill.eval.runner import EvalSpec, run_tasks


class _FakeLLM:
    """Counts tokens as words and answers every prompt with nothing."""

    def __init__(self) -> None:
        self.engine = SimpleNamespace(encode=lambda text: text.split())
        self.batches: list[int] = []

    def generate(self, prompts: list[str], params: object) -> list[SimpleNamespace]:
        self.batches.append(len(prompts))
        return [SimpleNamespace(text="") for _ in prompts]


def test_a_line_before_and_after_every_batch():
    lines: list[str] = []
    llm = _FakeLLM()
    spec = EvalSpec(("passkey", "variable_tracking"), (256, 512), num_samples=2)
    rows, _ = run_tasks(llm, spec, lines.append)  # type: ignore[arg-type]
    assert llm.batches == [2, 2, 2, 2] and len(rows) == 4
    starts = [ln for ln in lines if ln.startswith("[")]
    assert starts == [
        "[1/4] passkey @ 256: 2 samples ...",
        "[2/4] variable_tracking @ 256: 2 samples ...",
        "[3/4] passkey @ 512: 2 samples ...",
        "[4/4] variable_tracking @ 512: 2 samples ...",
    ]
    # each start is followed by its score line before the next batch starts
    assert [bool(re.search(r"@ +\d+: +[\d.]+ +\(2 samples", ln)) for ln in lines] == [False, True] * 4
