"""`kvspill manager`: a control server that supervises one `kvspill serve` child, with the web
dashboard (`kvspill.dashboard`, also served read-only by `kvspill serve` at `/ui`).

Layers: `supervisor` (the child process), `api` (the FastAPI control API over the registry and
the supervisor; it includes the dashboard page at `/`).
"""
