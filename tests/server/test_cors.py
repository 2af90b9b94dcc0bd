"""Browser pages and the server (server/cors.py): loopback pages by default, --allowed-origins
for others, the preflight answered before the key check, the real request still keyed."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from kvspill.server import ServerSettings, create_app
from kvspill.server.cors import parse_origins

from .test_inprocess import SlowEngine

PREFLIGHT = {
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization,content-type",
}


def _client(**settings) -> TestClient:  # type: ignore[no-untyped-def]
    return TestClient(create_app(SlowEngine, ServerSettings("fake", **settings)))


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://localhost:3000", True),
        ("https://127.0.0.1", True),
        ("http://[::1]:8080", True),
        ("http://localhost.evil.example", False),
        ("https://evil.example", False),
        ("null", False),
    ],
)
def test_loopback_pages_by_default(origin, allowed):
    with _client(api_key="k") as client:
        r = client.options("/v1/chat/completions", headers={"Origin": origin, **PREFLIGHT})
        assert (r.status_code == 200) is allowed
        assert (r.headers.get("access-control-allow-origin") == origin) is allowed
        assert r.headers.get("access-control-allow-credentials") is None
        # the preflight needs no key, the request does
        r = client.get("/v1/models", headers={"Origin": origin})
        assert r.status_code == 401
        r = client.get("/v1/models", headers={"Origin": origin, "Authorization": "Bearer k"})
        assert (
            r.status_code in (200, 503)
            and (r.headers.get("access-control-allow-origin") == origin) is allowed
        )


def test_allowed_origins_name_others():
    with _client(allowed_origins=("https://app.example",)) as client:
        ok = client.options("/v1/completions", headers={"Origin": "https://app.example", **PREFLIGHT})
        assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "https://app.example"
        local = client.options("/v1/completions", headers={"Origin": "http://localhost:3000", **PREFLIGHT})
        assert local.status_code == 400  # named origins replace the default
    with _client(allowed_origins=("*",)) as client:
        r = client.options("/v1/completions", headers={"Origin": "https://any.example", **PREFLIGHT})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"


def test_parse_origins():
    assert parse_origins(None) is None and parse_origins(" ") is None
    assert parse_origins('["*"]') == ("*",)
    assert parse_origins("https://a.example/, http://localhost:3000") == (
        "https://a.example",
        "http://localhost:3000",
    )
    with pytest.raises(ValueError, match="is not an origin"):
        parse_origins("a.example")
    with pytest.raises(ValueError):
        parse_origins('["a", 1]')
