"""`kvspill manager`: a control server that supervises one `kvspill serve` child, and the web
dashboard (also served read-only by `kvspill serve` at `/ui`).

Layers: `supervisor` (the child process), `api` (the FastAPI control API over the registry and
the supervisor), `pages` (the dashboard HTML and its vendored static files; imports nothing of
kvspill, so `kvspill.server` may include it).
"""
