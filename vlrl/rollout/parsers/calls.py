"""A reader for the Python-like call syntax of UI-TARS and pyautogui replies.

It reads calls whose arguments are only int/float literals and quoted strings, with a hand-written
tokenizer: nothing is evaluated, so model text cannot run code. Grammar::

    program := sep* [call (sep+ call)*] sep*        sep := newline | ';'
    call    := NAME ('.' NAME)* '(' [arg (',' arg)* [',']] ')'    (newlines allowed inside)
    arg     := value | NAME '=' value
    value   := NUMBER | STRING        NUMBER: [+-]digits[.digits]   STRING: '...' or "..."

Strings know the escapes ``\\\\ \\' \\" \\n \\t``; ``#`` starts a comment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from vlrl.rollout.parsers.base import ParseError, brief

Value = int | float | str

MAX_NUMBER_CHARS = 20
MAX_NAME_CHARS = 64

_TOKEN = re.compile(
    r"""(?P<space>[ \t\r\f]+)
      | (?P<comment>\#[^\n]*)
      | (?P<newline>\n)
      | (?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op>[(),=;.])
      | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""",
    re.VERBOSE | re.DOTALL,
)
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t"}


@dataclass(frozen=True, slots=True)
class Call:
    """One call as written: ``name`` is dotted (``pyautogui.click``); values are literals only."""

    name: str
    args: tuple[Value, ...]
    kwargs: dict[str, Value]


class _Token(NamedTuple):
    kind: str
    value: Value
    pos: int


def read_calls(text: str) -> list[Call]:
    """Read every call in ``text``; raise ParseError at the first thing outside the grammar."""
    reader = _Reader(_tokenize(text))
    calls = []
    while True:
        reader.skip("newline", ";")
        if reader.peek().kind == "end":
            return calls
        calls.append(reader.call())
        if reader.peek().kind not in ("newline", ";", "end"):
            raise reader.unexpected("a new line or ';' after the call")


def _tokenize(text: str) -> list[_Token]:
    tokens = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            if text[pos] in "'\"":
                raise ParseError(
                    f"string starting at position {pos} is not closed; expected a closing {text[pos]} "
                    f"(write a quote inside a string as \\{text[pos]})"
                )
            raise ParseError(
                f"unexpected character {text[pos]!r} at position {pos}; expected a call like name(arg, key='value')"
            )
        kind, raw = match.lastgroup, match.group()
        limit = {"number": MAX_NUMBER_CHARS, "name": MAX_NAME_CHARS}.get(kind, len(raw))
        if len(raw) > limit:
            raise ParseError(f"{kind} at position {pos} has {len(raw)} characters; expected at most {limit}")
        if kind == "number":
            tokens.append(_Token(kind, float(raw) if "." in raw else int(raw), pos))
        elif kind == "string":
            tokens.append(_Token(kind, _ESCAPE.sub(_unescape, raw[1:-1]), pos))
        elif kind in ("name", "op", "newline"):
            tokens.append(_Token(raw if kind == "op" else kind, raw, pos))
        pos = match.end()
    tokens.append(_Token("end", "", len(text)))
    return tokens


def _unescape(match: re.Match[str]) -> str:
    char = match.group(1)
    if char not in _ESCAPES:
        raise ParseError(f"unsupported escape {match.group()!r} in a string; expected one of \\\\ \\' \\\" \\n \\t")
    return _ESCAPES[char]


class _Reader:
    """Reads calls off the token list, looking at most two tokens ahead."""

    def __init__(self, tokens: list[_Token]) -> None:
        self._tokens = tokens
        self._i = 0

    def peek(self, ahead: int = 0) -> _Token:
        return self._tokens[min(self._i + ahead, len(self._tokens) - 1)]

    def take(self, kind: str, expected: str) -> _Token:
        token = self.peek()
        if token.kind != kind:
            raise self.unexpected(expected)
        self._i += 1
        return token

    def skip(self, *kinds: str) -> None:
        while self.peek().kind in kinds:
            self._i += 1

    def unexpected(self, expected: str) -> ParseError:
        token = self.peek()
        found = "the end of the text" if token.kind == "end" else brief(token.value)
        return ParseError(f"expected {expected} at position {token.pos}; found {found}")

    def call(self) -> Call:
        name = str(self.take("name", "a call like name(...)").value)
        while self.peek().kind == ".":
            self._i += 1
            name += "." + str(self.take("name", "a name after '.'").value)
        self.take("(", f"'(' after {brief(name)}")
        args: list[Value] = []
        kwargs: dict[str, Value] = {}
        while True:
            self.skip("newline")
            if self.peek().kind == ")":
                break
            where = f"argument {len(args) + len(kwargs) + 1} of {brief(name)}"
            if self.peek().kind == "name" and self.peek(1).kind == "=":
                key = str(self.take("name", "a keyword").value)
                self._i += 1
                if key in kwargs:
                    raise ParseError(f"{brief(name)} got {key!r} twice")
                kwargs[key] = self.value(where)
            elif kwargs:
                raise ParseError(f"{where} follows a keyword argument; expected key=value")
            else:
                args.append(self.value(where))
            self.skip("newline")
            if self.peek().kind != ",":
                break
            self._i += 1
        self.skip("newline")
        self.take(")", f"',' or ')' in the arguments of {brief(name)}")
        return Call(name, tuple(args), kwargs)

    def value(self, where: str) -> Value:
        token = self.peek()
        if token.kind not in ("number", "string"):
            raise self.unexpected(f"a number or a quoted string for {where}")
        self._i += 1
        return token.value
