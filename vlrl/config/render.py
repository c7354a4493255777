"""The config reference a run prints (``vlrl train RECIPE --print-config``).

One ``path = value  # type`` line per field under the field's docstring. Each path is a key that
``--set`` accepts, and a config-valued field shows the name that selects it, so the printout is
both the documentation and the list of what can be overridden.
"""

from __future__ import annotations

import dataclasses
from pathlib import PurePath
from typing import Any

from vlrl.config.schema import config_doc, config_name, field_docs, field_types, is_config, join_path, type_name


def render(cfg: Any, *, settable: bool = True) -> str:
    """The config tree ``cfg`` as commented text, every field with its value, type and docstring;
    ``settable=False`` for a resolved plan, whose paths ``--set`` does not take."""
    header = [f"# {type(cfg).__qualname__}", *_comment(config_doc(type(cfg)), "")]
    how = "# set a value with --set PATH=VALUE" if settable else "# resolved: set values on the config (--set), not here"
    lines = [*header, how]
    _render_fields(cfg, "", "", lines)
    return "\n".join(lines) + "\n"


def _render_fields(cfg: Any, prefix: str, pad: str, lines: list[str]) -> None:
    docs = field_docs(type(cfg))
    types_ = field_types(type(cfg))
    for f in dataclasses.fields(cfg):
        if not pad:
            lines.append("")
        lines.extend(_comment(docs.get(f.name, ""), pad))
        _render_value(getattr(cfg, f.name), join_path(prefix, f.name), type_name(types_[f.name]), pad, lines)


def _render_value(value: Any, path: str, type_text: str, pad: str, lines: list[str]) -> None:
    # "path = value" lines are keys --set takes; "path: ..." lines (list items) are reached through.
    if is_config(value):
        settable = not path.endswith("]")
        lines.append(f"{pad}{path}{' =' if settable else ':'} {config_name(type(value))}  # {type_text}")
        lines.extend(_comment(config_doc(type(value)), pad + "  "))
        _render_fields(value, path, pad + "  ", lines)
    elif isinstance(value, (list, tuple)) and any(map(is_config, value)):
        lines.append(f"{pad}{path}: {len(value)} items  # {type_text}")
        for i, item in enumerate(value):
            _render_value(item, f"{path}[{i}]", type(item).__qualname__, pad + "  ", lines)
    elif value is not None and is_secret(path):
        lines.append(f"{pad}{path} = <set, not shown>  # {type_text}")
    else:
        shown = str(value) if isinstance(value, PurePath) else value
        lines.append(f"{pad}{path} = {shown!r}  # {type_text}")


SECRET_WORDS = ("api_key", "auth_token", "secret", "password")
"""A field whose name holds one of these is printed as set or None, never its value: printed
configs end up in logs, terminals and bug reports."""


def is_secret(path: str) -> bool:
    name = path.rsplit(".", 1)[-1].lower()
    return any(word in name for word in SECRET_WORDS)


def _comment(text: str, pad: str) -> list[str]:
    return [f"{pad}# {line}".rstrip() for line in text.splitlines()]
