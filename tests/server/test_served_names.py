"""--served-model-name a,b (vLLM's several names): both listed in /v1/models and accepted, the
first reported in answers; another name is a 404."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from kvspill.server import ServerSettings, create_app

from .test_inprocess import SlowEngine


def test_several_served_names_are_listed_and_answered():
    app = create_app(SlowEngine, ServerSettings("coder", more_names=("coder-large",)))
    with TestClient(app) as client:
        while client.get("/health").status_code != 200:
            time.sleep(0.05)
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["coder", "coder-large"]
        assert client.get("/v1/models/coder-large").json()["id"] == "coder-large"
        body = {"model": "coder-large", "prompt": [1, 2], "max_tokens": 1}
        r = client.post("/v1/completions", json=body)
        assert r.status_code == 200 and r.json()["model"] == "coder"
        assert client.post("/v1/completions", json={**body, "model": "other"}).status_code == 404
