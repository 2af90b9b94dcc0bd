"""Which chat template a model is served with, and the generic tool-call format for templates
without tool support (docs/structured_outputs.md, "Tools on any model").

A model's own template may be several named ones (tokenizer_config.json's `chat_template` as a list
of {"name", "template"}: Hermes-2/3, Command-R, Mistral tool models; transformers 5's
`additional_chat_templates/` folder): transformers hands them over as a dict, and `named_template`
makes them one template that renders as transformers' `get_chat_template` picks: "tool_use" when
a request passes `tools` (and the model has one), else "default".

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
- The tools go into a system message; with `TOOLS_IN_USER` true (set by `TokenizerBundle.
  apply_chat_template` when the template refused that, e.g. Mistral v0.1/v0.2's "roles must
  alternate"), they and the system text go in front of the first user message instead.
- A named-templates one renders, with and without tools, exactly what transformers renders with
  the model's dict of templates.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any

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

# The template variable that moves the generic tools text into the first user message.
TOOLS_IN_USER = "kvspill_tools_in_user"

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
    "{%- set tools_text = ns.system ~ 'You can call these tools (one a line: "
    "its name, what it does, the JSON schema of its arguments):\\n' ~ tool_lines.text ~ "
    + repr(GENERIC_INSTRUCTION)  # a Python literal without ' is a Jinja literal too
    + " -%}\n"
    "{%- if " + TOOLS_IN_USER + " is defined and " + TOOLS_IN_USER + " -%}\n"
    # the template takes no system message: the text goes in front of the first user message
    "{%- set folded = namespace(msgs=[], done=false) -%}\n"
    "{%- for m in ns.msgs -%}\n"
    "{%- if not folded.done and m.role == 'user' -%}"
    "{%- set folded.done = true -%}"
    "{%- if m.content is string -%}"
    "{%- set folded.msgs = folded.msgs + [dict(m, content=tools_text ~ '\\n\\n' ~ m.content)] -%}"
    "{%- else -%}"
    "{%- set folded.msgs = folded.msgs + [dict(m, content=[{'type': 'text', 'text': tools_text ~ '\\n\\n'}] + m.content)] -%}"
    "{%- endif -%}"
    "{%- else -%}{%- set folded.msgs = folded.msgs + [m] -%}{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if not folded.done -%}{%- set folded.msgs = [{'role': 'user', 'content': tools_text}] + folded.msgs -%}{%- endif -%}\n"
    "{%- set messages = folded.msgs -%}\n"
    "{%- else -%}\n"
    "{%- set messages = [{'role': 'system', 'content': tools_text}] + ns.msgs -%}\n"
    "{%- endif -%}\n"
    "{%- endif -%}\n"
)


def with_generic_tools(template: str) -> str:
    """`template` able to take tools: unchanged when it already mentions them, else behind the prelude."""
    return template if "tools" in template else _PRELUDE + template


def is_generic(template: str | None) -> bool:
    return template is not None and GENERIC_MARKER in template


def shipped_template(name: str) -> str:
    return resources.files("kvspill.text").joinpath("templates", name).read_text(encoding="utf-8")


def named_template(templates: Mapping[str, str]) -> str | None:
    """One template of a model's named ones that renders as transformers picks among them
    (`PreTrainedTokenizerBase.get_chat_template`): "tool_use" where `tools` is passed (not None),
    else "default"; without a "default", a conversation without tools is refused, naming them.
    None when there are none."""
    if not templates:
        return None
    default = templates.get("default")
    tool_use = templates.get("tool_use")
    if default is None:
        names = ", ".join(repr(name) for name in sorted(templates))
        message = (
            f"this model has several chat templates ({names}) and none named 'default', the one "
            "a conversation uses: pass one with --chat-template FILE"
        )
        default = "{{ raise_exception(" + repr(message) + ") }}"
    if tool_use is None:
        return default
    # Each branch starts on a line of its own after its tag (trim_blocks drops that newline, and
    # lstrip_blocks sees the template's first line as a line start) and ends in an empty
    # expression (so lstrip_blocks strips no trailing spaces before the next tag): each renders
    # byte for byte as it does alone.
    return (
        "{% if tools is not none %}\n" + tool_use + "{{ '' }}{% else %}\n" + default + "{{ '' }}{% endif %}"
    )


def model_template(template: Any) -> str | None:
    """The model's chat template as one text: a str as it is; named templates (transformers' dict,
    or tokenizer_config.json's list of {"name", "template"}) through `named_template`; else None."""
    if isinstance(template, str):
        return template
    if isinstance(template, list):
        template = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
    if isinstance(template, Mapping):
        named = {str(k): v for k, v in template.items() if k is not None and isinstance(v, str)}
        return named_template(named)
    return None


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
