"""A schema-driven fuzz run of the API: schemathesis generates requests from the server's own
`/openapi.json` (bodies from the pydantic models), valid ones and invalid ones, for every
operation, and sends them to a real server process (tiny Llama, CPU, max_model_len 64 so any
generation is short). No response may be a 5xx (schemathesis's `not_a_server_error` check), no
stream may carry a `server_error` event, and afterwards the process must be alive and healthy.

Reproducible: hypothesis is derandomized (same cases each run) with no example database.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from fuzz_cases import run_cases
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from .conftest import Server, start_server, stop_server

pytestmark = pytest.mark.slow

# Per POST operation and mode: 4 operations x 2 modes x 64 = 512 cases. 100 (800 cases, 77 s of a
# 2-core CI worker) put the suite past its 15 minutes on 2026-12-04.
EXAMPLES_PER_MODE = 64
MIN_CASES = 320


@pytest.fixture(scope="module")
def fuzz_server(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("fuzz") / "server.log"
    s = start_server(tiny_llama_dir, "--max-model-len", "64", log=log)
    yield s
    stop_server(s)


def _stream_failure(response) -> str | None:
    """A `server_error` event inside a 200 stream is a 5xx in disguise."""
    content_type = {k.lower(): v for k, v in response.headers.items()}.get("content-type", [""])
    if response.status_code != 200 or not content_type[0].startswith("text/event-stream"):
        return None
    return next((line for line in response.text.splitlines() if '"server_error"' in line), None)


def test_fuzz_finds_no_server_error(fuzz_server: Server):
    schema = schemathesis.openapi.from_url(fuzz_server.url + "/openapi.json")
    counts: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    started = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()
        # An operation without parameters or body has no invalid form to generate.
        has_input = operation.method.upper() == "POST"
        modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE] if has_input else [GenerationMode.POSITIVE]
        for mode in modes:

            def on_case(case) -> None:
                label = case.operation.label
                response = case.call(base_url=fuzz_server.url, timeout=30)
                counts[label] += 1
                try:
                    case.validate_response(response, checks=[not_a_server_error])
                except Exception as e:  # noqa: BLE001 - collect them all, report at the end
                    failures.append(
                        f"{label} {case.body!r} -> {response.status_code} {response.text[:300]}: {e}"
                    )
                if (event := _stream_failure(response)) is not None:
                    failures.append(f"{label} {case.body!r} -> stream event {event[:300]}")

            run_cases(operation, mode, EXAMPLES_PER_MODE, on_case)
    elapsed = time.monotonic() - started
    total = sum(counts.values())
    print(f"fuzz: {total} cases in {elapsed:.1f} s: {dict(counts)}")
    assert not failures, "\n".join(failures[:20])
    assert total >= MIN_CASES, dict(counts)
    assert {
        "POST /v1/completions",
        "POST /v1/chat/completions",
        "POST /tokenize",
        "POST /detokenize",
        "GET /v1/models",
        "GET /health",
    } <= set(counts)
    assert fuzz_server.proc.poll() is None, "the server process died"
    assert httpx.get(fuzz_server.url + "/health", timeout=5).status_code == 200
    r = httpx.post(fuzz_server.url + "/v1/completions", json={"prompt": "hello", "max_tokens": 3}, timeout=30)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
    assert httpx.get(fuzz_server.url + "/v1/kv", timeout=5).json()["requests"] == {}  # nothing leaked
