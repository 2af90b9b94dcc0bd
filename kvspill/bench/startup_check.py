"""`python -m kvspill.bench.startup_check`: how long `kvspill serve` takes to answer, and what its
first requests cost (issue 50, item 5).

Starts `kvspill serve` (the embedded model unless `-- ARGS` say otherwise) as a child process,
polls `/health` until it answers 200 and then sends `--requests` streaming chat completions one
after another, each with its own question (`QUESTIONS`: no two share a first word, so the prefix
cache helps no more than it helps any user's chat). It prints time to `/health` 200 (from just before the child starts), each request's
TTFT (first content chunk) and end-to-end latency, the first request's TTFT over the median of
the others (the steady TTFT), and the engine's own start-up summary line from the server's log.

Invariants: the child is always stopped (SIGTERM, then SIGKILL after 10 s); a server that exits
or fails to answer within `--timeout` is a non-zero exit with the log's last lines. This is the
benchmark of start-up and first-request latency: tests never time it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HEALTH_POLL_S = 0.02
# Questions that share no first word, so a request finds cached only what every chat shares (the
# chat template's opening), as a new user's first and later questions would.
QUESTIONS = (
    "Write a short poem about the sea.",
    "What is the capital of France?",
    "Explain recursion in one sentence.",
    "Give me three names for a cat.",
    "How many legs does a spider have?",
    "Why is the sky blue?",
    "Translate 'good morning' into German.",
    "Suggest a title for a mystery novel.",
)


@dataclass
class RequestTiming:
    ttft_s: float
    e2e_s: float


@dataclass
class StartupReport:
    health_s: float
    requests: list[RequestTiming] = field(default_factory=list)
    startup_line: str = ""

    @property
    def steady_ttft_s(self) -> float | None:
        rest = [r.ttft_s for r in self.requests[1:]]
        return statistics.median(rest) if rest else None

    @property
    def first_over_steady(self) -> float | None:
        steady = self.steady_ttft_s
        return self.requests[0].ttft_s / steady if self.requests and steady else None


def _get_status(port: int, path: str) -> int | None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except OSError:
        return None  # not listening yet
    finally:
        conn.close()


def wait_for_health(port: int, child: subprocess.Popen[bytes], t0: float, timeout_s: float) -> float:
    """Seconds from `t0` until /health answers 200; raises if the child exits or time runs out."""
    while time.perf_counter() - t0 < timeout_s:
        if _get_status(port, "/health") == 200:
            return time.perf_counter() - t0
        if child.poll() is not None:
            raise RuntimeError(f"the server exited with code {child.returncode} before /health answered 200")
        time.sleep(HEALTH_POLL_S)
    raise RuntimeError(f"/health did not answer 200 within {timeout_s:.0f} s")


def chat_request(port: int, index: int, max_tokens: int) -> RequestTiming:
    """One streaming chat completion; TTFT is the first chunk that carries content."""
    question = QUESTIONS[index % len(QUESTIONS)]
    body = {
        "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
    }
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120.0)
    start = time.perf_counter()
    ttft: float | None = None
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"request {index} answered HTTP {resp.status}: {resp.read()[:200]!r}")
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            delta = json.loads(line[5:])["choices"][0].get("delta", {}) if ttft is None else {}
            if ttft is None and delta.get("content"):
                ttft = time.perf_counter() - start
    finally:
        conn.close()
    if ttft is None:
        raise RuntimeError(f"request {index} streamed no content")
    return RequestTiming(ttft, time.perf_counter() - start)


def _startup_line(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines()
    return next((line for line in lines if "start-up " in line and " s:" in line), "")


def _stop(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def run(
    port: int, num_requests: int, max_tokens: int, serve_args: list[str], timeout_s: float
) -> StartupReport:
    """Start the server, time /health and the requests, stop the server."""
    command = [sys.executable, "-m", "kvspill", "serve", "--port", str(port), *serve_args]
    with tempfile.NamedTemporaryFile(prefix="startup_check-", suffix=".log", delete=False) as log_file:
        log = Path(log_file.name)
    with log.open("wb") as out:
        t0 = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        try:
            report = StartupReport(wait_for_health(port, child, t0, timeout_s))
            report.requests = [chat_request(port, i, max_tokens) for i in range(num_requests)]
        except RuntimeError as e:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise RuntimeError(f"{e}\n--- server log ({log}) ---\n{tail}") from e
        finally:
            _stop(child)
    report.startup_line = _startup_line(log)
    log.unlink()
    return report


def format_report(report: StartupReport) -> str:
    lines = [f"/health 200 after {report.health_s:.2f} s"]
    for i, r in enumerate(report.requests):
        lines.append(f"request {i + 1}: TTFT {r.ttft_s * 1e3:.0f} ms, end-to-end {r.e2e_s * 1e3:.0f} ms")
    if report.steady_ttft_s is not None and report.first_over_steady is not None:
        lines.append(
            f"first TTFT / steady TTFT (median of the others, {report.steady_ttft_s * 1e3:.0f} ms): "
            f"{report.first_over_steady:.2f}x"
        )
    if report.startup_line:
        lines.append(f"engine: {report.startup_line.strip()}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="Arguments after -- go to kvspill serve."
    )
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--requests", type=int, default=5, help="Chat requests sent one after another.")
    parser.add_argument("--max-tokens", type=int, default=8, help="Tokens each request generates.")
    parser.add_argument("--timeout", type=float, default=300.0, help="Seconds /health may take.")
    parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
    args, serve_args = parser.parse_known_args(argv)
    serve_args = [a for a in serve_args if a != "--"]
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    try:
        report = run(args.port, args.requests, args.max_tokens, serve_args, args.timeout)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.json:
        payload = {
            **asdict(report),
            "steady_ttft_s": report.steady_ttft_s,
            "first_over_steady": report.first_over_steady,
        }
        print(json.dumps(payload, indent=2))
    else:
        print(format_report(report))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
