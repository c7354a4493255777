"""Command-line flags mapped onto config fields, so a command's flags never restate a default.

A ``Flag`` names one config field by its dotted path (``--max-batch`` sets ``engine.max_batch``);
``add_flags`` adds it to a parser with the field's docstring and the default the config holds,
read from a config instance, as its help. A flag left out sets nothing (argparse's ``SUPPRESS``),
so the config's own default applies; ``flag_overrides`` turns the flags given into ``--set``
overrides, parsed and validated by the field's type like any other (``apply_overrides``), so a bad
value is named by its field.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vlrl.config.schema import field_docs


@dataclass(frozen=True, slots=True)
class Flag:
    """One command-line flag that sets one config field."""

    name: str
    """The flag, such as ``--max-batch``."""
    path: str
    """The dotted path of the field it sets, such as ``engine.max_batch``."""
    sets: str | None = None
    """For a switch that takes no value: the value it sets (``--no-chance`` sets ``eval.chance`` to
    ``false``); None: the flag takes one."""
    repeat: bool = False
    """The flag may be given several times; its values form the field's list."""
    metavar: str | None = None
    """The value's name in the help (None: the flag's name in capitals)."""
    doc: str | None = None
    """The help in place of the field's docstring (a switch that turns the field off)."""


def add_flags(parser: argparse.ArgumentParser, config: Any, flags: Sequence[Flag]) -> None:
    """``flags`` on ``parser``, each helped by its field's docstring and ``config``'s value of it."""
    for flag in flags:
        doc, default = _doc_and_value(config, flag.path)
        doc = flag.doc or doc
        shown = "" if flag.sets is not None else f"; default: {default!r}"
        help_ = f"{doc} (--set {flag.path}{shown})".replace("%", "%%")
        dest, metavar = _dest(flag), flag.metavar or flag.name.lstrip("-").upper().replace("-", "_")
        if flag.sets is not None:
            parser.add_argument(flag.name, dest=dest, action="store_const", const=flag.sets, default=argparse.SUPPRESS, help=help_)
        elif flag.repeat:
            parser.add_argument(flag.name, dest=dest, action="append", default=argparse.SUPPRESS, metavar=metavar, help=help_)
        else:
            parser.add_argument(flag.name, dest=dest, default=argparse.SUPPRESS, metavar=metavar, help=help_)


def flag_overrides(args: argparse.Namespace, flags: Sequence[Flag]) -> list[str]:
    """The ``--set`` overrides (``path=value``) of the flags given in ``args``, in ``flags``' order."""
    out = []
    for flag in flags:
        if not hasattr(args, _dest(flag)):
            continue
        value = getattr(args, _dest(flag))
        out.append(f"{flag.path}=[{','.join(value)}]" if flag.repeat else f"{flag.path}={value}")
    return out


def _dest(flag: Flag) -> str:
    return "flag_" + flag.path.replace(".", "__")


def _doc_and_value(config: Any, path: str) -> tuple[str, Any]:
    """The first sentence of the docstring of the field at ``path`` under ``config``, and its value."""
    *parents, name = path.split(".")
    for part in parents:
        config = getattr(config, part)
    doc = " ".join(field_docs(type(config)).get(name, "").split())
    return re.split(r"(?<=[a-z)])\. (?=[A-Z])", doc)[0].rstrip("."), getattr(config, name)
