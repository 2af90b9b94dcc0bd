"""`python -m kvspill.server [MODEL] [flags]`: the same as `kvspill serve`."""

from __future__ import annotations

import logging

import typer

from kvspill.cli import serve_cmd


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("kvspill").setLevel(logging.INFO)
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(serve_cmd.serve_command)
    app()


if __name__ == "__main__":
    main()
