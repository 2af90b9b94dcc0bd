"""An empty key is refused (exit 2) by every command that serves behind one: `--api-key ''`, or
the variable set to spaces, used to run with no key (`serve`, `embed-serve`) or with a random key
the manager then did not show."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from kvspill.cli import manager_cmd, rag_cmd


def _app(register) -> typer.Typer:  # type: ignore[no-untyped-def]
    app = typer.Typer()
    register(app)

    @app.command("noop", hidden=True)
    def _noop() -> None:  # a second command keeps typer's group (command names on the line)
        pass

    return app


@pytest.mark.parametrize(
    ("register", "args", "env"),
    [
        (manager_cmd.register, ["manager", "--api-key", ""], {}),
        (manager_cmd.register, ["manager"], {"KVSPILL_MANAGER_API_KEY": "  "}),
        (rag_cmd.register, ["embed-serve", "--api-key", " "], {}),
    ],
)
def test_empty_keys_exit_2_saying_so(register, args, env):
    out = CliRunner().invoke(_app(register), args, env=env)
    assert out.exit_code == 2 and "--api-key is empty" in out.output, out.output
