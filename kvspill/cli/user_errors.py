"""How the CLI reports a user's error: one line saying what to change, a non-zero exit, and the
traceback only with `kvspill --debug ...` (set by `cli.main.main`, which also turns on debug logs)."""

from __future__ import annotations

import os
import traceback
from typing import NoReturn

import typer

DEBUG_ENV = "KVSPILL_DEBUG"


def debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def fail(e: Exception | str, code: int = 2) -> NoReturn:
    """Print `error: ...` (with the traceback under --debug) and exit with `code`."""
    if debug_enabled() and isinstance(e, Exception):
        traceback.print_exception(e)
    typer.echo(f"error: {e}", err=True)
    raise typer.Exit(code)


def refuse_empty_key(key: str | None, flag: str = "--api-key", env: str = "KVSPILL_API_KEY") -> None:
    """An empty key (often a variable set to nothing) would serve with no key at all: exit 2."""
    if key is not None and not key.strip():
        fail(
            f"{flag} is empty (is {env} set to an empty value?): give a key, or leave out both the "
            "flag and the variable to run without one"
        )
