"""`kvspill chat`'s loop (cli/chat_session.py): Ctrl-C stops a reply and keeps the session."""

from __future__ import annotations

import io
from dataclasses import dataclass

from kvspill.cli.chat_session import ChatSession


@dataclass
class Out:
    delta_text: str


class FakeLLM:
    def __init__(self) -> None:
        self.prompts: list[list[dict[str, str]]] = []
        self.closed = 0
        self.session: ChatSession | None = None

    def chat_prompt(self, messages):
        self.prompts.append([dict(m) for m in messages])
        return [1, 2, 3]

    def stream(self, prompt, params):
        try:
            for i, word in enumerate(["one ", "two ", "three ", "four "]):
                if i == 2 and "stop" in self.prompts[-1][-1]["content"]:
                    assert self.session is not None
                    self.session.stop_reply.set()  # what Ctrl-C's handler does
                yield Out(word)
        finally:
            self.closed += 1


def _session(lines: list[str]) -> tuple[ChatSession, FakeLLM, io.StringIO]:
    llm, out = FakeLLM(), io.StringIO()
    session = ChatSession(llm, params=None, system="be brief", out=out)
    llm.session = session
    feed = iter(lines)

    def read_line(_prompt: str) -> str:
        item = next(feed)
        if item == "^C":
            raise KeyboardInterrupt
        if item == "^D":
            raise EOFError
        return item

    session.run(read_line, on_error=lambda e: (_ for _ in ()).throw(e))
    return session, llm, out


def test_ctrl_c_stops_the_reply_and_keeps_what_was_shown_and_the_session() -> None:
    session, llm, out = _session(["please stop early", "^C", "again", "^D"])
    assert "one two three  [stopped]" in out.getvalue()
    assert "(Ctrl-D, an empty line or /exit quits)" in out.getvalue()
    roles = [m["role"] for m in session.history]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert session.history[2]["content"] == "one two three "  # the part shown stays
    assert session.history[4]["content"] == "one two three four "
    assert llm.closed == 2  # every stream closed (the engine request aborted)
    assert llm.prompts[-1][1]["content"] == "please stop early"  # the second turn saw the first


def test_reset_keeps_the_system_prompt_and_exit_ends() -> None:
    session, _, _ = _session(["hello", "/reset", "/exit", "never read"])
    assert session.history == [{"role": "system", "content": "be brief"}]


def test_commands_are_confirmed_and_never_sent_to_the_model() -> None:
    session, llm, out = _session(
        ["hello", "/clear", "/help", "/resett", "/usr/bin is where?", "/bye", "never"]
    )
    text = out.getvalue()
    assert "(history cleared: the system prompt stays)" in text
    assert "/reset or /clear" in text and "/exit or /bye" in text  # the help
    assert "unknown command /resett: /help lists them" in text
    # the mistyped command reached no prompt; a line with spaces is a message
    assert [p[-1]["content"] for p in llm.prompts] == ["hello", "/usr/bin is where?"]
    assert [m["role"] for m in session.history] == ["system", "user", "assistant"]


def test_reset_without_a_system_prompt_empties_the_history() -> None:
    llm, out = FakeLLM(), io.StringIO()
    session = ChatSession(llm, params=None, system=None, out=out)
    feed = iter(["hi", "/reset", ""])
    session.run(lambda _prompt: next(feed), on_error=lambda e: (_ for _ in ()).throw(e))
    assert session.history == [] and "(history cleared)\n" in out.getvalue()
