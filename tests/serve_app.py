"""A typer app holding `kvspill serve` beside a second command (so `serve` stays a subcommand),
for tests that drive the serve command line without the whole CLI."""

from __future__ import annotations

import typer

from kvspill.cli import serve_cmd


def serve_app() -> typer.Typer:
    app = typer.Typer()
    serve_cmd.register(app)
    app.command("noop")(lambda: None)
    return app
