"""`kvspill chat` on a chat template that fails (none at all, or a --system message the template
refuses): one `error:` line and exit 2, as `generate --chat` gives; a later turn the template
refuses is dropped and the session goes on. A KvspillError no command caught is one line too."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvspill.cli import main as cli_main
from kvspill.cli.chat_session import ChatSession
from kvspill.errors import ChatTemplateError, UnsupportedModelError

STRICT = (
    "{{- bos_token }}{%- for message in messages %}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif %}"
    "{{- message['content'] }}{%- endfor %}"
)


def _with_template(src: Path, dst: Path, template: str | None) -> Path:
    shutil.copytree(src, dst)
    (dst / "chat_template.jinja").unlink()
    config = json.loads((dst / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    if template is not None:
        config["chat_template"] = template
    (dst / "tokenizer_config.json").write_text(json.dumps(config))
    return dst


@pytest.mark.parametrize(
    ("template", "system", "message"),
    [
        (None, None, "has no chat template"),
        (STRICT, "Be terse.", "takes no system message (Conversation roles must alternate"),
    ],
)
def test_chat_fails_in_one_line_with_exit_2(
    tmp_path: Path, tiny_llama_dir: Path, template: str | None, system: str | None, message: str
) -> None:
    model = _with_template(tiny_llama_dir, tmp_path / "m", template)
    cli_main._register_commands()
    args = ["chat", "--model", str(model), "--device", "cpu", "--max-model-len", "64"]
    result = CliRunner().invoke(
        cli_main.app, args + (["--system", system] if system else []), input="hello\n"
    )
    assert result.exit_code == 2, result.output  # an exception escaping the command exits 1
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0]


class _RefusingLLM:
    """A model whose template refuses the second user turn."""

    def __init__(self) -> None:
        self.turns = 0

    def chat_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        if sum(m["role"] == "user" for m in messages) == 2:
            raise ChatTemplateError("no second turn")
        return [1, 2]

    def stream(self, prompt: list[int], params: Any) -> Iterator[Any]:
        class Out:
            delta_text = "ok"

        self.turns += 1
        yield Out()


def test_a_turn_the_template_refuses_is_dropped_and_the_session_goes_on() -> None:
    import io

    llm, errors = _RefusingLLM(), []
    session = ChatSession(llm, params=None, system=None, out=io.StringIO())
    session.reply("one", errors.append)
    session.reply("two", errors.append)  # refused: reported, not raised
    assert [str(e) for e in errors] == ["no second turn"]
    assert [m["content"] for m in session.history] == ["one", "ok"]  # the refused turn is not kept
    assert llm.turns == 1


def test_main_prints_an_uncaught_kvspill_error_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def escapes() -> None:
        raise UnsupportedModelError("what to change")

    monkeypatch.setattr(cli_main, "_register_commands", lambda: None)
    monkeypatch.setattr(cli_main, "app", escapes)
    monkeypatch.setattr("sys.argv", ["kvspill", "chat"])
    with pytest.raises(SystemExit) as e:
        cli_main.main()
    assert e.value.code == 2
    assert capsys.readouterr().err == "error: what to change\n"
