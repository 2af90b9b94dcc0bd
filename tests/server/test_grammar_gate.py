"""Issue 48's grammar-compile denial of service and its 500s, through a real server: attack-sized
specs are 400s at once, deep JSON anywhere is a 400 (never a 500), unsatisfiable schemas are
400s, a compile past --guided-compile-timeout is a 400 while another client's stream keeps its
pace, and a client past --guided-compile-budget gets a 429.

One server (tiny random Llama with SmolLM2's tokenizer, the Hermes tool template) with a 1 s
compile deadline and a 1 s per-minute compile budget; the tests run in file order (the budget
one spends what the deadline one left)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from .conftest import start_server, stop_server

pytestmark = pytest.mark.slow

TEMPLATE = Path(__file__).with_name("tools_template.jinja")
# Far past the 1 s deadline on SmolLM2's vocabulary, under every static limit: many optional
# properties of which one must appear (at 400 properties minutes on a 100-token vocabulary, see
# tests/guided/test_compile_pool.py). Without minProperties the 1,000 compiled in 3.2 s with
# xgrammar 0.2.8 and 1.1 s with 0.2.9 (2-core CPU): too close to the deadline.
SLOW = {
    "type": "object",
    "properties": {f"p{i}": {"type": "string"} for i in range(1000)},
    "minProperties": 1,
}
SMALL = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


@pytest.fixture(scope="module")
def server(tiny_smol_vocab_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("srv") / "server.log"
    flags = (
        "--chat-template",
        str(TEMPLATE),
        "--guided-compile-timeout",
        "1",
        "--guided-compile-budget",
        "1",
    )
    s = start_server(tiny_smol_vocab_dir, *flags, log=log)
    yield s
    stop_server(s)


def _chat(server, timeout: float = 60, **body) -> httpx.Response:
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    body.setdefault("max_tokens", 8)
    return httpx.post(
        server.url + "/v1/chat/completions", json={"model": server.model, **body}, timeout=timeout
    )


def _error(response: httpx.Response, status: int = 400) -> dict:
    assert response.status_code == status, response.text
    return response.json()["error"]


def _nested(depth: int) -> dict:
    value: dict = {"type": "string"}
    for _ in range(depth):
        value = {"type": "object", "properties": {"x": value}}
    return value


def test_attack_sized_specs_are_400s_at_once(server) -> None:
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(3000)}}
    rules = "root::=r0\n" + "\n".join(f'r{i}::="x"r{i + 1}' for i in range(10_000))
    cases = [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": wide}}},
         "response_format", "max_properties=1000"),
        ({"guided_json": {"enum": [f"v{i}" for i in range(50_000)]}}, "guided_json", "max_"),
        ({"guided_json": _nested(300)}, "guided_json", "max_depth=64"),
        ({"guided_grammar": rules}, "guided_grammar", "max_grammar_rules=2000"),
    ]  # fmt: skip
    for body, param, limit in cases:
        start = time.monotonic()
        error = _error(_chat(server, **body))
        assert time.monotonic() - start < 2.0
        assert error["param"] == param and limit in error["message"], error


def test_deep_json_is_a_400_never_a_500(server) -> None:
    deep_text = '{"a":' * 100_000 + "1" + "}" * 100_000
    tool = {"type": "function", "function": {"name": "f", "parameters": _nested(400)}}
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": deep_text}}
    call_dict = {**call, "function": {"name": "f", "arguments": _nested(400)}}
    cases = [
        ({"guided_json": deep_text}, "guided_json"),
        ({"guided_json": _nested(400)}, "guided_json"),
        ({"tools": [tool]}, "tools"),
        ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [call]}]}, "messages"),
        ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [call_dict]}]},
         "messages"),
    ]  # fmt: skip
    for body, param in cases:
        error = _error(_chat(server, **body))
        assert error["param"] == param and "max_depth=64" in error["message"], error


def test_unsatisfiable_schemas_are_400s(server) -> None:
    cases = [
        ({**SMALL, "required": ["b"], "additionalProperties": False}, "#/required"),
        ({"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 1}, "#:"),
        ({"type": "string", "enum": ["a", 1]}, "1 is not of type string"),
    ]
    for schema, where in cases:
        error = _error(_chat(server, guided_json=schema))
        assert "no value can satisfy" in error["message"] and where in error["message"], error


def test_a_slow_compile_is_a_400_and_other_streams_keep_their_pace(server) -> None:
    assert _chat(server, guided_json=SMALL).status_code == 200  # starts the compile worker
    times: list[float] = []
    stop = threading.Event()
    victim = threading.Thread(target=_stream_until, args=(server, stop, times))
    victim.start()
    try:
        while len(times) < 5:
            assert victim.is_alive()
            time.sleep(0.05)
        start = time.monotonic()
        error = _error(_chat(server, guided_json=SLOW))
        end = time.monotonic()
        assert error["param"] == "guided_json" and "--guided-compile-timeout=1" in error["message"]
        assert end - start < 3.0
        time.sleep(0.5)
    finally:
        stop.set()
        victim.join(60)
    window = [t for t in times if start - 0.5 <= t <= end + 0.5]
    assert window and window[0] < start and window[-1] > end, "the victim streamed through the attack"
    gaps = [b - a for a, b in zip(window, window[1:], strict=False)]
    assert max(gaps) < 2.0, f"largest token gap {max(gaps):.2f} s while a grammar compiled"


def _stream_until(server, stop: threading.Event, times: list[float]) -> None:
    """Stream chat answers one after another, noting when each chunk arrives, until `stop`."""
    body = {"model": server.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 300,
            "ignore_eos": True, "stream": True}  # fmt: skip
    while not stop.is_set():
        with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if stop.is_set():
                    return
                if line.startswith("data: {"):
                    times.append(time.monotonic())


def test_a_client_past_its_compile_budget_gets_a_429(server) -> None:
    # The slow compile above spent the client's 1 s; run alone, this one spends it here.
    variant = {**SLOW, "title": "another grammar"}
    first = _chat(server, guided_json=variant)
    assert first.status_code in (400, 429), first.text
    response = _chat(server, guided_json={**SMALL, "minProperties": 1})  # a new grammar
    error = _error(response, 429)
    assert "--guided-compile-budget" in error["message"] and error["type"] == "rate_limit_error"
    assert 1 <= int(response.headers["Retry-After"]) <= 60
    assert _chat(server, guided_json=SMALL).status_code == 200  # cached grammars cost nothing
