"""`kvspill service` (`kvspill/cli/service_cmd.py`, `cli/systemd_unit.py`): the unit against golden
files and `systemd-analyze verify` (where installed), `install` checking the serve arguments as the
service will run them, and the other verbs against a fake systemctl / journalctl on PATH."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvspill.cli import main as cli_main
from kvspill.cli.systemd_unit import UnitSpec, check_name, quote_word, render_unit, stop_timeout_s

GOLDEN = Path(__file__).parent / "golden"
SYSTEM = UnitSpec(
    name="kvspill-8b",
    user_mode=False,
    command=("/opt/kvspill/bin/python", "-m", "kvspill"),
    serve_args=(
        "/models/Llama 3.1 8B.gguf",
        "--host",
        "0.0.0.0",
        "--cpu-kv-budget",
        "32GiB",
        "--served-model-name",
        "llama$8b 100%",
    ),
    working_directory="/srv/kvspill",
    shutdown_timeout_s=30.0,
    environment_file="/etc/kvspill/kvspill-8b.env",
    run_as="kvspill",
    version="0.1.0",
)
USER = UnitSpec(
    name="kvspill",
    user_mode=True,
    command=("/home/me/.venv/bin/python", "-m", "kvspill"),
    serve_args=("--config", "/home/me/serve.toml"),
    working_directory="/home/me",
    shutdown_timeout_s=7.5,
    environment_file="%h/.config/kvspill/kvspill.env",
    version="0.1.0",
)


@pytest.mark.parametrize(("spec", "golden"), [(SYSTEM, "kvspill-8b.service"), (USER, "kvspill-user.service")])
def test_the_unit_matches_its_golden_file(spec, golden):
    assert render_unit(spec) == (GOLDEN / golden).read_text()


def test_the_unit_says_what_a_draining_server_needs():
    unit = render_unit(SYSTEM).splitlines()
    for line in (
        "Restart=on-failure",
        "RestartPreventExitStatus=2",
        "LimitMEMLOCK=infinity",
        "KillSignal=SIGTERM",
        "KillMode=mixed",
        "TimeoutStopSec=45",
        "SuccessExitStatus=143 SIGTERM",
        "User=kvspill",
        "WantedBy=multi-user.target",
    ):
        assert line in unit, line
    assert stop_timeout_s(0) == 15 and stop_timeout_s(30.2) == 46
    assert "WantedBy=default.target" in render_unit(USER) and "User=" not in render_unit(USER)


@pytest.mark.parametrize(
    ("word", "quoted"),
    [
        ("--port", "--port"),
        ("/models/a.gguf", "/models/a.gguf"),
        ("two words", '"two words"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("100%", '"100%%"'),
        ("$HOME", '"$$HOME"'),
        ("", '""'),
    ],
)
def test_exec_words_are_quoted_for_systemd(word, quoted):
    assert quote_word(word) == quoted


def test_a_line_break_or_a_bad_name_is_refused():
    with pytest.raises(ValueError, match="line break"):
        quote_word("a\nb")
    assert check_name("llm.service") == "llm"
    for bad in ("", "a b", "../x", "-x", "llm@1"):
        with pytest.raises(ValueError, match="a unit name is"):
            check_name(bad)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
@pytest.mark.parametrize("spec", [SYSTEM, USER], ids=["system", "user"])
def test_systemd_analyze_verifies_the_unit(spec, tmp_path):
    # What systemd would check on this host: an ExecStart binary that exists, a directory, no user.
    real = UnitSpec(
        **{
            **spec.__dict__,
            "command": (sys.executable, "-m", "kvspill"),
            "working_directory": str(tmp_path),
            "run_as": None,
        }
    )
    path = tmp_path / f"{spec.name}.service"
    path.write_text(render_unit(real))
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    argv = ["systemd-analyze", *(["--user"] if spec.user_mode else []), "verify", "--man=no", str(path)]
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    # verify exits 0 on an unknown key or a bad value too, and says so on stderr, naming the file.
    assert result.returncode == 0 and str(path) not in result.stderr, result.stderr


# -- the commands, against a fake systemctl / journalctl ----------------------------------------------


FAKE = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
exit ${{FAKE_RC:-0}}
"""


@pytest.fixture
def fake_systemd(tmp_path, monkeypatch) -> Path:
    """systemctl and journalctl on PATH that log their arguments; their exit status is $FAKE_RC."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    log.touch()
    for tool in ("systemctl", "journalctl"):
        script = bin_dir / tool
        script.write_text(FAKE.format(log=log))
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for key in [k for k in os.environ if k.startswith("KVSPILL_")]:
        monkeypatch.delenv(key)
    return log


def _kvspill(*args: str, env: dict[str, str] | None = None):
    cli_main._register_commands()
    return CliRunner().invoke(cli_main.app, list(args), env=env)


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines()


def test_install_dry_run_prints_the_unit_with_the_resolved_drain_time(fake_systemd, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "serve.toml").write_text("shutdown-timeout = 40\nport = 9000\n")
    result = _kvspill("service", "install", "--dry-run", "--", "--config", "serve.toml")
    assert result.exit_code == 0, result.output
    assert "TimeoutStopSec=55" in result.output  # the file's 40 s + the margin
    assert f"WorkingDirectory={tmp_path}" in result.output  # where serve.toml is found
    assert "-m kvspill serve --config serve.toml\n" in result.output
    assert _calls(fake_systemd) == [] and not (tmp_path / "config").exists()


def test_install_refuses_bad_serve_arguments_before_writing(fake_systemd, tmp_path):
    for args, message in (
        (["--block-size", "7"], "error: --block-size must be 8, 16, 32, 64 or 128, got 7"),
        (["--no-such-flag"], "No such option"),
    ):
        result = _kvspill("service", "install", "--user", "--", *args)
        assert result.exit_code == 2 and message in result.output, result.output
    assert _calls(fake_systemd) == [] and not (tmp_path / "config").exists()


def test_install_warns_of_shell_settings_the_service_will_not_see(fake_systemd):
    result = _kvspill("service", "install", "--dry-run", env={"KVSPILL_SHUTDOWN_TIMEOUT": "99"})
    assert result.exit_code == 0, result.output
    assert "KVSPILL_SHUTDOWN_TIMEOUT set in this shell will not reach the service" in result.output
    assert "TimeoutStopSec=45" in result.output  # the service's 30 s default, not the shell's 99


def test_the_drain_time_follows_the_environment_file(fake_systemd, tmp_path, monkeypatch):
    """KVSPILL_SHUTDOWN_TIMEOUT in the unit's EnvironmentFile (where the docs put KVSPILL_*
    settings) sets TimeoutStopSec as a flag would: systemd must not kill a server still draining."""
    monkeypatch.setenv("HOME", str(tmp_path))
    env_file = tmp_path / ".config" / "kvspill" / "kvspill.env"
    env_file.parent.mkdir(parents=True)
    env_file.write_text('# settings\nKVSPILL_SHUTDOWN_TIMEOUT="90"\nKVSPILL_API_KEY=k\n')
    result = _kvspill("service", "install", "--user", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "TimeoutStopSec=105" in result.output  # 90 s + the margin


def test_install_writes_reloads_and_enables_a_user_unit(fake_systemd, tmp_path):
    result = _kvspill("service", "install", "--user", "--name", "llm", "--", "--port", "9001")
    assert result.exit_code == 0, result.output
    path = tmp_path / "config" / "systemd" / "user" / "llm.service"
    assert f"wrote {path}" in result.output and "loginctl enable-linger" in result.output
    assert "-m kvspill serve --port 9001\n" in path.read_text()
    assert _calls(fake_systemd) == ["systemctl --user daemon-reload", "systemctl --user enable llm.service"]
    again = _kvspill("service", "install", "--user", "--name", "llm", "--", "--port", "9002")
    assert f"replaced {path}" in again.output and "--port 9002\n" in path.read_text()


def test_install_into_a_unit_dir_writes_only(fake_systemd, tmp_path):
    result = _kvspill("service", "install", "--unit-dir", str(tmp_path / "units"), "--run-as", "kvspill")
    assert result.exit_code == 0, result.output
    assert "User=kvspill" in (tmp_path / "units" / "kvspill.service").read_text()
    assert _calls(fake_systemd) == []
    refused = _kvspill("service", "install", "--user", "--run-as", "kvspill", "--dry-run")
    assert refused.exit_code == 2 and "--run-as is for system units" in refused.output


@pytest.mark.parametrize(
    ("args", "call"),
    [
        (["start"], "systemctl start kvspill.service"),
        (["stop", "--user"], "systemctl --user stop kvspill.service"),
        (["restart", "--name", "llm.service"], "systemctl restart llm.service"),
        (["status", "--user", "--name", "llm"], "systemctl --user status --no-pager llm.service"),
        (["logs"], "journalctl -u kvspill.service --no-pager -n 100"),
        (
            ["logs", "--user", "-f", "-n", "5", "--since", "1 hour ago"],
            "journalctl --user-unit kvspill.service --no-pager -n 5 -f --since 1 hour ago",
        ),
    ],
)
def test_the_verbs_wrap_systemctl_and_journalctl(fake_systemd, args, call):
    result = _kvspill("service", *args)
    assert result.exit_code == 0, result.output
    assert _calls(fake_systemd) == [call]


def test_their_exit_status_is_systemctls(fake_systemd):
    result = _kvspill("service", "status", env={"FAKE_RC": "3"})  # systemctl: unit not active
    assert result.exit_code == 3


def test_uninstall_disables_removes_and_reloads(fake_systemd, tmp_path):
    assert _kvspill("service", "install", "--user").exit_code == 0
    path = tmp_path / "config" / "systemd" / "user" / "kvspill.service"
    fake_systemd.write_text("")
    result = _kvspill("service", "uninstall", "--user")
    assert result.exit_code == 0, result.output
    assert not path.exists()
    assert _calls(fake_systemd) == [
        "systemctl --user disable --now kvspill.service",
        "systemctl --user daemon-reload",
    ]
    missing = _kvspill("service", "uninstall", "--user")
    assert (
        missing.exit_code == 1
        and f"no unit file at {path} (was it installed without --user?)" in missing.output
    )


def test_without_systemctl_on_path_one_line_says_so(fake_systemd, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = _kvspill("service", "start")
    assert result.exit_code == 1
    assert result.output.startswith("error: systemctl not found on PATH") and result.output.count("\n") == 1
