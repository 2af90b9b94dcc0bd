"""Which chat template a model is served with, and the generic tool-call format for templates
without tool support (docs/structured_outputs.md, "Tools on any model").

The choice, first match wins: `--chat-template FILE`; for the embedded SmolLM2-135M-Instruct
either its own template (the generic format) or the one shipped in `templates/` (`EMBEDDED_TEMPLATE`:
its own template plus a Hermes-style tool block), as `EMBEDDED_USES_GENERIC` says; the model's own
template. A chosen template that never mentions `tools` is wrapped by
`with_generic_tools`: a Jinja prelude that, when a request has tools, puts them into the system
message and rewrites earlier tool calls and tool results as the JSON the generic format answers in.

Invariants:
- Without tools the wrapped template renders exactly what the model's own template renders: the
  prelude changes nothing unless `tools` is given.
- The wrapped template carries `GENERIC_MARKER`, which is how the server knows to use the generic
  format (server/generic_tools.py) rather than parse a template's own tool-call syntax.
"""

from __future__ import annotations

from importlib import resources

GENERIC_MARKER = "kvspill generic tool calls"
EMBEDDED_TEMPLATE = "smollm2_tools.jinja"
# The generic format: with it the 135M model calls tools under tool_choice auto, which it never did
# with the shipped Hermes template (measured in docs/structured_outputs.md, "The embedded model").
EMBEDDED_USES_GENERIC = True

# The instruction the model reads; server/generic_tools.py builds the grammar of exactly this shape.
GENERIC_INSTRUCTION = (
    'Answer with one JSON object and nothing else: {"tool_calls": [{"name": <tool name>, '
    '"arguments": {<its arguments>}}]} to call tools, or {"response": "<your answer>"} to answer '
    "the user directly."
)

# `tools` here are the server's compact tool lines ({"name", "description", "parameters"}).
_PRELUDE = (
    "{#- " + GENERIC_MARKER + " (kvspill/text/chat_templates.py) -#}\n"
    "{%- if tools -%}\n"
    "{%- set ns = namespace(msgs=[], system='') -%}\n"
    "{%- for m in messages -%}\n"
    "{%- if loop.first and m.role in ('system', 'developer') -%}"
    "{%- set ns.system = m.content ~ '\\n\\n' -%}\n"
    "{%- elif m.role == 'assistant' and m.tool_calls -%}"
    "{%- set calls = namespace(items=[]) -%}"
    "{%- for c in m.tool_calls -%}"
    "{%- set calls.items = calls.items + [{'name': c.function.name, 'arguments': c.function.arguments}] -%}"
    "{%- endfor -%}"
    "{%- set ns.msgs = ns.msgs + [{'role': 'assistant', 'content': {'tool_calls': calls.items} | tojson}] -%}\n"
    "{%- elif m.role == 'tool' -%}"
    "{%- set ns.msgs = ns.msgs + [{'role': 'user', 'content': {'tool_response': m.content} | tojson}] -%}\n"
    "{%- else -%}{%- set ns.msgs = ns.msgs + [m] -%}{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- set tool_lines = namespace(text='') -%}\n"
    "{%- for t in tools -%}{%- set tool_lines.text = tool_lines.text ~ (t | tojson) ~ '\\n' -%}{%- endfor -%}\n"
    "{%- set messages = [{'role': 'system', 'content': ns.system ~ 'You can call these tools (one a line: "
    "its name, what it does, the JSON schema of its arguments):\\n' ~ tool_lines.text ~ "
    + repr(GENERIC_INSTRUCTION)  # a Python literal without ' is a Jinja literal too
    + "}] + ns.msgs -%}\n"
    "{%- endif -%}\n"
)


def with_generic_tools(template: str) -> str:
    """`template` able to take tools: unchanged when it already mentions them, else behind the prelude."""
    return template if "tools" in template else _PRELUDE + template


def is_generic(template: str | None) -> bool:
    return template is not None and GENERIC_MARKER in template


def shipped_template(name: str) -> str:
    return resources.files("kvspill.text").joinpath("templates", name).read_text(encoding="utf-8")


def choose_chat_template(model_template: str | None, override: str | None, embedded: bool) -> str | None:
    """The template to serve with: `override` (a --chat-template file's text), else the embedded
    model's shipped one, else the model's own; None (a base model) stays None."""
    if override is not None:
        template: str | None = override
    elif embedded and model_template is not None:
        template = model_template if EMBEDDED_USES_GENERIC else shipped_template(EMBEDDED_TEMPLATE)
    else:
        template = model_template
    return None if template is None else with_generic_tools(template)
