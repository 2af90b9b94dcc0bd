"""One way to run schemathesis cases of an operation (tests/server/test_fuzz.py and
tests/fault/test_fuzz_more_routes.py): derandomized, no example database, every health check off."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode


def run_cases(operation: Any, mode: GenerationMode, examples: int, on_case: Callable[[Any], None]) -> None:
    """Call `on_case` on up to `examples` generated cases; an operation with no invalid form to
    generate (a string path parameter) ends quietly in NEGATIVE mode."""

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run_case(case: Any) -> None:
        on_case(case)

    try:
        run_case()
    except Unsatisfiable:
        if mode != GenerationMode.NEGATIVE:
            raise
