"""Chat templates rendered as transformers renders them: the same jinja2 environment, globals and filters, so a
model's template from the Hub gives the same prompt here as under `tokenizer.apply_chat_template`.

Decisions, and why (transformers 5's chat_template_utils, learned from, not copied):
- A sandboxed, immutable environment with trim_blocks and lstrip_blocks and the loopcontrols extension: templates
  are untrusted code from a model folder, and their whitespace is written for those two settings.
- `raise_exception(msg)` raises a TemplateError (what templates call to refuse a conversation, e.g. roles not
  alternating); here it becomes a ValueError naming the template's message, a 400 for the client.
- `tojson` is transformers' (json.dumps, ensure_ascii off, no HTML escaping), not jinja's; `strftime_now(fmt)`
  is the local time formatted; `namespace` refuses underscore names and `dict` builds plain dicts.
- `{% generation %}` blocks (assistant-mask tracking in transformers) render their body unchanged.
- Messages keep only keys whose value is not None, and the tokenizer's special tokens (bos_token, eos_token, ...)
  are variables of the template, as transformers passes them.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["render_chat_template"]


class _Generation(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: transformers tracks assistant spans with it; the text is kept."""

    tags = {"generation"}  # noqa: RUF012 (jinja reads it from the class)

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return str(caller())


class _Namespace(jinja2.utils.Namespace):
    def __init__(*args: Any, **kwargs: Any) -> None:  # jinja's Namespace signature: self in *args
        self, values = args[0], dict(*args[1:], **kwargs)
        for name in values:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, values)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a chat template cannot set the attribute {name!r} on a namespace")


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> jinja2.Environment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, namespace=_Namespace, dict=dict)
    return env


_ENV = _environment()
_COMPILED: dict[str, jinja2.Template] = {}


def render_chat_template(
    template: str, messages: list[dict[str, Any]], add_generation_prompt: bool, variables: dict[str, Any]
) -> str:
    """The prompt text of `messages`; ValueError when a message is not a dict or the template refuses them."""
    compiled = _COMPILED.get(template)
    if compiled is None:
        try:
            compiled = _COMPILED.setdefault(template, _ENV.from_string(template))
        except jinja2.exceptions.TemplateSyntaxError as e:
            raise ValueError(f"the model's chat template is not valid jinja: {e}") from None
    chat = []
    for message in messages:
        if not isinstance(message, dict):
            raise ValueError(f"chat messages must be objects with 'role' and 'content', got {message!r}")
        chat.append({k: v for k, v in message.items() if v is not None})
    try:
        return compiled.render(
            **variables, messages=chat, tools=None, documents=None, add_generation_prompt=add_generation_prompt
        )
    except jinja2.exceptions.TemplateError as e:
        raise ValueError(f"the model's chat template refused the messages: {e}") from None
