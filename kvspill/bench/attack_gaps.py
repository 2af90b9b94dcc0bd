"""A victim stream's largest token gap while each attack of issue 48 runs against a server.

    python -m kvspill.bench.attack_gaps --url http://127.0.0.1:8000 --rag-repo proj --out gaps.jsonl

The server is a real `kvspill serve --rag --rag-root ROOT` (the embedded model on the CPU is the
intended case); `--rag-repo` names a directory under ROOT to index. For each attack a victim
streams a chat completion while the attack runs; one JSON line per attack records the victim's
largest gap between two tokens, its token count, and what the attack got (status codes, seconds).
The issue's bar: every gap under 2 s.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

VICTIM_TOKENS = 200
SLOW_BODY_CONNECTIONS = 200


@dataclass
class Gaps:
    attack: str
    victim_tokens: int = 0
    victim_max_gap_s: float = 0.0
    victim_error: str | None = None
    attack_result: dict[str, Any] = field(default_factory=dict)


def _victim(url: str, headers: dict[str, str], out: Gaps, started: threading.Event) -> None:
    body = {
        "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}],
        "max_tokens": VICTIM_TOKENS,
        "stream": True,
        "ignore_eos": True,
    }
    last = None
    try:
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, headers=headers, timeout=300) as r:
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                now = time.monotonic()
                if last is None:
                    started.set()
                else:
                    out.victim_max_gap_s = max(out.victim_max_gap_s, now - last)
                last = now
                out.victim_tokens += 1
    except httpx.HTTPError as e:
        out.victim_error = str(e)
    finally:
        started.set()


def _timed(fn: Callable[[], Any]) -> dict[str, Any]:
    start = time.monotonic()
    try:
        result = fn()
    except httpx.HTTPError as e:
        result = {"error": str(e)}
    return {"seconds": round(time.monotonic() - start, 3), **(result if isinstance(result, dict) else {})}


def _post(url: str, path: str, body: Any, headers: dict[str, str], timeout: float = 300) -> dict[str, Any]:
    r = httpx.post(url + path, json=body, headers=headers, timeout=timeout)
    return {"status": r.status_code, "body": r.text[:200]}


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def attacks(url: str, headers: dict[str, str], repo: str) -> dict[str, Callable[[], Any]]:
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(3000)}}
    chat = [{"role": "user", "content": "hi"}]
    return {
        "glob *?*?...*# in include": lambda: _post(
            url,
            "/precache/repo",
            {"path": repo, "include": ["*?" * 12 + "*#"], "allow_removal": False},
            headers,
        ),
        "json schema with 3,000 optional properties": lambda: _post(
            url,
            "/v1/chat/completions",
            {
                "messages": chat,
                "max_tokens": 4,
                "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": wide}},
            },
            headers,
        ),  # fmt: skip
        "100,000-deep JSON in guided_json and tool arguments": lambda: _deep_json(url, headers),
        "a 7,000-token prefill, then a 1-token request": lambda: _long_prefill(url, headers),
        f"{SLOW_BODY_CONNECTIONS} slow bodies": lambda: _slow_bodies(url, headers),
        "index the repo, cancelled by DELETE": lambda: _index_and_cancel(url, headers, repo),
        "two indexes of one repo at once": lambda: _two_indexes(url, headers, repo),
    }


def _deep_json(url: str, headers: dict[str, str]) -> dict[str, Any]:
    chat = [{"role": "user", "content": "hi"}]
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": _deep(100_000)}}
    guided = _post(
        url,
        "/v1/chat/completions",
        {"messages": chat, "max_tokens": 4, "guided_json": _deep(100_000)},
        headers,
    )
    tool_args = _post(
        url, "/v1/chat/completions",
        {"messages": [*chat, {"role": "assistant", "tool_calls": [call]}], "tools": [tool], "max_tokens": 4}, headers,
    )  # fmt: skip
    return {"guided_json": guided["status"], "tool_arguments": tool_args["status"]}


def _long_prefill(url: str, headers: dict[str, str]) -> dict[str, Any]:
    long = {"prompt": "the quick brown fox jumps over the lazy dog " * 700, "max_tokens": 1}
    worker = threading.Thread(target=_post, args=(url, "/v1/completions", long, headers), daemon=True)
    worker.start()
    time.sleep(1.0)
    start = time.monotonic()
    short = _post(url, "/v1/completions", {"prompt": "hi", "max_tokens": 1}, headers)
    ttft = time.monotonic() - start
    worker.join(600)
    return {"short_status": short["status"], "short_request_s_during_prefill": round(ttft, 3)}


def _slow_bodies(url: str, headers: dict[str, str]) -> dict[str, Any]:
    host, port = url.rsplit("//", 1)[1].split(":")
    conns = []
    for _ in range(SLOW_BODY_CONNECTIONS):
        try:
            c = socket.create_connection((host, int(port)), timeout=5, source_address=("127.0.0.2", 0))
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\n{")
            conns.append(c)
        except OSError:
            break
    health = [httpx.get(url + "/health", timeout=10).status_code for _ in range(5)]
    time.sleep(2)
    for c in conns:
        c.close()
    return {"connections_opened": len(conns), "health_statuses": health}


def _index_and_cancel(url: str, headers: dict[str, str], repo: str) -> dict[str, Any]:
    r = httpx.post(url + "/precache/repo", json={"path": repo, "async": True}, headers=headers, timeout=30)
    job = r.json().get("id")
    time.sleep(1.0)
    d = httpx.delete(f"{url}/precache/jobs/{job}", headers=headers, timeout=30)
    return {"submit": r.status_code, "delete": d.status_code}


def _two_indexes(url: str, headers: dict[str, str], repo: str) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    threads = [
        threading.Thread(target=lambda: results.append(_post(url, "/precache/repo", {"path": repo}, headers)))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    return {"statuses": [r["status"] for r in results]}


def run(url: str, api_key: str | None, repo: str) -> list[Gaps]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    rows = []
    for name, attack in attacks(url, headers, repo).items():
        row = Gaps(name)
        started = threading.Event()
        victim = threading.Thread(target=_victim, args=(url, headers, row, started))
        victim.start()
        started.wait(120)
        row.attack_result = _timed(attack)
        victim.join(600)
        rows.append(row)
        print(json.dumps(asdict(row)), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--api-key")
    parser.add_argument("--rag-repo", required=True, help="a directory under the server's --rag-root")
    parser.add_argument("--out", help="write the JSON lines here too")
    args = parser.parse_args()
    rows = run(args.url, args.api_key, args.rag_repo)
    if args.out:
        with open(args.out, "w") as f:
            f.writelines(json.dumps(asdict(r)) + "\n" for r in rows)
    worst = max((r.victim_max_gap_s for r in rows), default=0.0)
    print(f"largest victim gap across {len(rows)} attacks: {worst:.2f} s")


if __name__ == "__main__":
    main()
