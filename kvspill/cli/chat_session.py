"""`kvspill chat`'s loop: line editing and history (readline), Ctrl-C stops a reply, not the session.

Ctrl-C during a reply sets a flag that the loop reads between engine steps (never inside one, so
the engine is left consistent); the request is aborted and the part already shown stays in the
conversation. Ctrl-C at the prompt clears the line; Ctrl-D, an empty line or /exit quits. A
one-word line starting with / is a command (/help lists them), never a message to the model.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TextIO

# Ollama's spellings beside ours: its users type /bye and /clear
EXIT_COMMANDS = ("/exit", "/quit", "/bye")
RESET_COMMANDS = ("/reset", "/clear")
HELP_COMMANDS = ("/help", "/?")
HELP = (
    "/reset or /clear   forget the conversation (a --system prompt stays)\n"
    "/exit or /bye      quit (also Ctrl-D or an empty line)\n"
    "/help              this list\n"
    "Ctrl-C stops a reply; what was shown stays in the conversation.\n"
)


class ChatModel(Protocol):
    def chat_prompt(self, messages: list[dict[str, str]]) -> list[int]: ...
    def stream(self, prompt: list[int], params: Any) -> Iterator[Any]: ...


def enable_line_editing() -> None:
    """Arrow keys, in-line editing and history for input() where readline exists (not Windows)."""
    try:
        import readline  # noqa: F401  (importing it is what turns editing on)
    except ImportError:
        pass


class ChatSession:
    def __init__(self, llm: ChatModel, params: Any, system: str | None, out: TextIO = sys.stdout) -> None:
        self.llm, self.params, self.system, self.out = llm, params, system, out
        self.history: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
        self.stop_reply = threading.Event()

    def reset(self) -> None:
        self.history = self.history[:1] if self.system else []

    def reply(self, text: str, on_error: Callable[[Exception], None]) -> None:
        """Stream the model's answer to `text`; Ctrl-C (or `stop_reply`) ends it between steps."""
        self.history.append({"role": "user", "content": text})
        self.stop_reply.clear()
        previous = _set_sigint(lambda *_: self.stop_reply.set())
        reply = ""
        stream: Iterator[Any] | None = None
        try:
            # a chat-template error (a role it refuses) drops the turn as an engine error does
            stream = self.llm.stream(self.llm.chat_prompt(self.history), self.params)
            for out in stream:
                self.out.write(out.delta_text)
                self.out.flush()
                reply += out.delta_text
                if self.stop_reply.is_set():
                    self.out.write(" [stopped]")
                    break
        except Exception as e:  # a KvspillError (template or engine): the turn is dropped, the session stays
            on_error(e)
            self.history.pop()
            return
        finally:
            if stream is not None and hasattr(stream, "close"):
                stream.close()  # aborts the request if it is still running
            _set_sigint(previous)
        self.out.write("\n")
        self.history.append({"role": "assistant", "content": reply})

    def run(self, read_line: Callable[[str], str], on_error: Callable[[Exception], None]) -> None:
        while True:
            try:
                line = read_line(">>> ")
            except EOFError:
                self.out.write("\n")
                return
            except KeyboardInterrupt:
                self.out.write("\n(Ctrl-D, an empty line or /exit quits)\n")
                continue
            command = line.strip()
            if not command or command in EXIT_COMMANDS:
                return
            if command in RESET_COMMANDS:
                self.reset()
                self.out.write(
                    "(history cleared" + (": the system prompt stays)\n" if self.system else ")\n")
                )
                continue
            if command in HELP_COMMANDS:
                self.out.write(HELP)
                continue
            if command.startswith("/") and " " not in command:
                # a mistyped command is not sent to the model as a message (Ollama's rule too)
                self.out.write(f"unknown command {command}: /help lists them\n")
                continue
            self.reply(line, on_error)


def _set_sigint(handler: Any) -> Any:
    """Install a SIGINT handler where we can (the main thread); returns the previous one."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if handler is None:
        return None
    return signal.signal(signal.SIGINT, handler)
