"""Bad input is a 4xx in OpenAI's error shape, never a 500, a traceback or a cut connection:
lone surrogates and invalid UTF-8 everywhere text goes, bodies over --max-request-bytes (413
before parsing), unknown routes and methods, JSON nested too deep, too many or too long stop
strings; HEAD /health answers; the Host allow-list refuses names a rebinding page would send."""

from __future__ import annotations

import time

import httpx
import pytest

from kvspill.sampling_params import MAX_STOP_STRING_CHARS, MAX_STOP_STRINGS, SamplingParams


def _assert_openai_error(response: httpx.Response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if code is not None:
        assert error["code"] == code, error
    return error


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/completions", '{"prompt": "\\ud800", "max_tokens": 2}'),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "\\ud800"}]}'),
        ("/tokenize", '{"prompt": "\\ud800"}'),
        ("/v1/completions", '{"model": "\\ud800", "prompt": "hi"}'),
        ("/v1/completions", '{"prompt": "a \\udfff b", "stop": ["x"]}'),
    ],
)
def test_lone_surrogates_are_400(tiny_app, path: str, body: str) -> None:
    with httpx.Client(base_url=tiny_app.url) as client:
        r = client.post(path, content=body, headers={"content-type": "application/json"})
        _assert_openai_error(r, 400, "invalid_encoding")
        # The keep-alive connection survives for the client's next request.
        assert client.post("/tokenize", json={"prompt": "a b"}).status_code == 200


def test_a_valid_surrogate_pair_is_a_character(tiny_app) -> None:
    body = '{"prompt": "party \\ud83c\\udf89"}'
    r = httpx.post(tiny_app.url + "/tokenize", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json()["count"] > 1


def test_invalid_utf8_is_400(tiny_app) -> None:
    body = b'{"prompt": "caf\xe9", "max_tokens": 2}'
    r = httpx.post(
        tiny_app.url + "/v1/completions", content=body, headers={"content-type": "application/json"}
    )
    assert "UTF-8" in _assert_openai_error(r, 400, "invalid_encoding")["message"]


def test_a_body_over_the_limit_is_413_before_it_is_read(tiny_app) -> None:
    huge = b'{"prompt": "' + b"a " * (1 << 20) + b'"}'  # 2 MiB against a 64 KiB limit
    start = time.monotonic()
    r = httpx.post(
        tiny_app.url + "/v1/completions", content=huge, headers={"content-type": "application/json"}
    )
    assert "--max-request-bytes" in _assert_openai_error(r, 413, "request_too_large")["message"]

    def chunks():  # no Content-Length: refused once the bytes read pass the limit
        for _ in range(64):
            yield b"a" * 32768

    r = httpx.post(tiny_app.url + "/tokenize", content=chunks(), headers={"content-type": "application/json"})
    _assert_openai_error(r, 413, "request_too_large")
    assert time.monotonic() - start < 10


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/v1/nothing", 404, "not_found"),
        ("DELETE", "/v1/completions", 405, "method_not_allowed"),
        ("GET", "/v1/chat/completions", 405, "method_not_allowed"),
    ],
)
def test_routing_errors_are_openai_shaped(tiny_app, method: str, path: str, status: int, code: str) -> None:
    _assert_openai_error(httpx.request(method, tiny_app.url + path), status, code)


def test_deep_json_and_wrong_types_are_400(tiny_app) -> None:
    deep = '{"prompt": ' + "[" * 30_000 + "]" * 30_000 + "}"
    r = httpx.post(
        tiny_app.url + "/v1/completions", content=deep, headers={"content-type": "application/json"}
    )
    _assert_openai_error(r, 400)
    r = httpx.post(tiny_app.url + "/v1/completions", json={"prompt": {"a": 1}})
    _assert_openai_error(r, 400)


def test_head_health(tiny_app) -> None:
    r = httpx.head(tiny_app.url + "/health")
    assert r.status_code == 200 and r.content == b""


def test_stop_string_limits() -> None:
    SamplingParams(stop=tuple(f"s{i}" for i in range(MAX_STOP_STRINGS)))
    with pytest.raises(ValueError, match=f"at most {MAX_STOP_STRINGS} stop strings"):
        SamplingParams(stop=tuple(f"s{i}" for i in range(MAX_STOP_STRINGS + 1)))
    with pytest.raises(ValueError, match=f"at most {MAX_STOP_STRING_CHARS} characters"):
        SamplingParams(stop=("x" * (MAX_STOP_STRING_CHARS + 1),))


def test_too_many_stop_strings_are_400(tiny_app) -> None:
    r = httpx.post(
        tiny_app.url + "/v1/completions",
        json={"prompt": "a", "stop": [str(i) for i in range(MAX_STOP_STRINGS + 1)], "max_tokens": 2},
    )
    assert _assert_openai_error(r, 400)["param"] == "stop"


def test_tiny_temperature_is_greedy(tiny_app) -> None:
    assert SamplingParams(temperature=1e-40).greedy and not SamplingParams(temperature=1e-4).greedy
    texts = {
        httpx.post(
            tiny_app.url + "/v1/completions",
            json={"prompt": "the cat", "max_tokens": 4, "temperature": t, "ignore_eos": True},
            timeout=60,
        ).json()["choices"][0]["text"]
        for t in (0.0, 1e-40, 1e-6)
    }
    assert len(texts) == 1


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example"])
def test_foreign_host_headers_are_refused(tiny_app, host: str) -> None:
    r = httpx.post(tiny_app.url + "/tokenize", json={"prompt": "a"}, headers={"host": host})
    assert "--allowed-hosts" in _assert_openai_error(r, 400, "invalid_host")["message"]


@pytest.mark.parametrize("host", ["localhost", "localhost:8000", "127.0.0.1:1", "[::1]:8000"])
def test_loopback_host_headers_are_answered(tiny_app, host: str) -> None:
    r = httpx.post(tiny_app.url + "/tokenize", json={"prompt": "a"}, headers={"host": host})
    assert r.status_code == 200


def test_every_kind_of_the_stability_abuse_mix_is_answered_as_expected(tiny_app) -> None:
    from kvspill.bench.suites.abuse import AbuseMix

    mix = AbuseMix(tiny_app.url, oversize_bytes=128 * 1024)  # past the fixture's 64 KiB limit
    try:
        outcomes = mix.send(10)  # one of each kind
    finally:
        mix.close()
    assert len({o.kind for o in outcomes}) == 10
    assert [o.err for o in outcomes if not o.ok] == []
    assert {o.kind: o.status for o in outcomes}["oversized"] == 413
