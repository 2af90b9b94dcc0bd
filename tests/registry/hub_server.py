"""A local stand-in for the Hugging Face Hub's file API, for offline pull tests.

It answers what huggingface_hub 2.4's `snapshot_download` / `hf_hub_download` call:
- GET  /api/models/{repo}/revision/{rev}  (repo_info: the commit sha)
- GET  /api/models/{repo}/tree/{rev}      (list_repo_tree: path, size, oid, lfs; one page)
- HEAD /{repo}/resolve/{rev}/{file}       (X-Repo-Commit, ETag, Content-Length)
- GET  /{repo}/resolve/{rev}/{file}       (the bytes; `Range: bytes=N-` gives 206)
No X-Xet-Hash header and no xetHash in the tree, so huggingface_hub takes the plain HTTP path even
with hf_xet installed. `drop_after[file] = N` makes the first GET of `file` send N bytes of the
declared length and close the connection (an interrupted transfer). Every request is recorded.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Request:
    method: str
    path: str
    range: str | None


@dataclass
class HubState:
    repos: dict[str, dict[str, Path]] = field(default_factory=dict)  # repo id -> repo path -> local file
    drop_after: dict[str, int] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)

    def fetched(self) -> set[str]:
        """The repo paths of every file requested (HEAD or GET)."""
        return {
            r.path.split("/resolve/", 1)[1].split("/", 1)[1] for r in self.requests if "/resolve/" in r.path
        }

    def gets_of(self, filename: str) -> list[Request]:
        return [r for r in self.requests if r.method == "GET" and r.path.endswith("/" + filename)]


@dataclass
class Hub:
    """What a test gets: the server's URL and state, and where to download and register."""

    url: str
    state: HubState
    cache: Path  # the HF cache the tests download into
    data: Path  # the kvspill registry's data dir


@functools.cache
def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    state: HubState  # set on the subclass the server makes

    def log_message(self, *args: object) -> None:  # quiet test output
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        self.state.requests.append(Request(self.command, path, self.headers.get("Range")))
        if path.startswith("/api/models/"):
            self._api(path[len("/api/models/") :])
        elif "/resolve/" in path:
            repo_id, _, rest = path.lstrip("/").partition("/resolve/")
            rev, _, filename = rest.partition("/")
            self._file(repo_id, rev, filename, body)
        else:
            self._error(404, "EntryNotFound")

    def _api(self, rest: str) -> None:
        for marker in ("/revision/", "/tree/"):
            if marker in rest:
                repo_id, _, rev = rest.partition(marker)
                break
        else:
            return self._error(404, "EntryNotFound")
        files = self.state.repos.get(repo_id)
        if files is None:
            return self._error(404, "RepoNotFound")
        if rev not in ("main", COMMIT):
            return self._error(404, "RevisionNotFound")
        if marker == "/revision/":
            payload: object = {"id": repo_id, "sha": COMMIT, "siblings": [{"rfilename": f} for f in files]}
        else:
            payload = [_tree_entry(name, local) for name, local in sorted(files.items())]
        self._json(payload)

    def _file(self, repo_id: str, rev: str, filename: str, body: bool) -> None:
        files = self.state.repos.get(repo_id)
        if files is None:
            return self._error(404, "RepoNotFound")
        if rev not in ("main", COMMIT) or filename not in files:
            return self._error(404, "EntryNotFound" if rev in ("main", COMMIT) else "RevisionNotFound")
        data = files[filename].read_bytes()
        start = int(self.headers["Range"].split("=")[1].split("-")[0]) if self.headers.get("Range") else 0
        self.send_response(206 if start else 200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{_sha256(files[filename])}"')
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(data) - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if not body:
            return
        cut = self.state.drop_after.pop(filename, None)
        if cut is not None and not start:
            self.wfile.write(data[:cut])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(data[start:])

    def _json(self, payload: object) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _error(self, status: int, code: str) -> None:
        raw = json.dumps({"error": code}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", code)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(raw)


def _tree_entry(name: str, local: Path) -> dict[str, object]:
    size = local.stat().st_size
    entry: dict[str, object] = {"type": "file", "path": name, "size": size, "oid": "0" * 40}
    if name.endswith((".safetensors", ".gguf")):  # the Hub stores weights through LFS
        entry["lfs"] = {"oid": _sha256(local), "size": size, "pointerSize": 134}
    return entry


class HubServer:
    """`with HubServer(state) as url:` serves `state` on 127.0.0.1 at a free port."""

    def __init__(self, state: HubState) -> None:
        handler = type("Handler", (_Handler,), {"state": state})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
