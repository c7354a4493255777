"""Typed configs: constraint markers, strict validation, and the docstrings under fields.

A config is a ``@dataclass(kw_only=True, slots=True)`` class, usually nested as ``Config`` in the
component it builds (``RayStore.Config``). Each field has a type, optional ``Annotated``
constraints and a docstring written under it. ``validate`` walks a whole tree so that a bad value
fails at load time, naming the dotted path, the value and what was expected, instead of failing
deep inside a run. Types are checked strictly (``True`` is not an ``int``; an ``int`` is a fine
``float``) because recipes are code and a wrong type there is a bug worth stopping for.
"""

from __future__ import annotations

import abc
import ast
import dataclasses
import inspect
import operator
import textwrap
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from vlrl.errors import PicklesWhole

_UNIONS = (Union, types.UnionType)


class Constraint(abc.ABC):
    """A rule on a field's value beyond its type, attached with ``Annotated[T, rule]``."""

    __slots__ = ()

    @abc.abstractmethod
    def holds(self, value: Any) -> bool:
        """Whether ``value`` (already of the field's type) obeys the rule."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Bound(Constraint):
    """A comparison with ``bound``; subclasses name the operator."""

    bound: float
    _compare: ClassVar[Callable[[Any, Any], bool]]
    _symbol: ClassVar[str]

    def holds(self, value: Any) -> bool:
        return type(self)._compare(value, self.bound)

    def __str__(self) -> str:
        return f"{self._symbol} {self.bound}"


class Ge(_Bound):
    """The value is at least ``bound``."""

    __slots__ = ()
    _compare, _symbol = operator.ge, ">="


class Gt(_Bound):
    """The value is above ``bound``."""

    __slots__ = ()
    _compare, _symbol = operator.gt, ">"


class Le(_Bound):
    """The value is at most ``bound``."""

    __slots__ = ()
    _compare, _symbol = operator.le, "<="


class Lt(_Bound):
    """The value is below ``bound``."""

    __slots__ = ()
    _compare, _symbol = operator.lt, "<"


@dataclasses.dataclass(frozen=True, slots=True)
class NonEmpty(Constraint):
    """The value (a string or container) has at least one element."""

    def holds(self, value: Any) -> bool:
        return len(value) > 0

    def __str__(self) -> str:
        return "of length >= 1"


class ConfigError(PicklesWhole, ValueError):
    """A wrong config value: ``path`` is the dotted field (``store.chunk_rows``), ``value`` what was
    given and ``expected`` what would have been accepted."""

    def __init__(self, path: str, value: Any, expected: str, *, got: str | None = None, hint: str = "") -> None:
        super().__init__(path, value, expected)
        self.path = path
        self.value = value
        self.expected = expected
        self.got = describe_value(value) if got is None else got
        self.hint = hint

    def __str__(self) -> str:
        where = f"config field '{self.path}'" if self.path else "config"
        message = f"{where}: got {self.got}; expected {self.expected}"
        return f"{message}; {self.hint}" if self.hint else message

    def under(self, prefix: str) -> ConfigError:
        """This error seen from ``prefix``: ``check()`` names fields relative to its own config."""
        return ConfigError(join_path(prefix, self.path), self.value, self.expected, got=self.got, hint=self.hint)


def is_config(value: Any) -> bool:
    """Whether ``value`` is a config instance (a dataclass instance, not a dataclass class)."""
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def is_config_type(tp: Any) -> bool:
    """Whether ``tp`` is a config class (a dataclass)."""
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def config_name(cls: type) -> str:
    """The name that selects ``cls`` on the command line: ``RayStore.Config`` -> ``RayStore``."""
    return cls.__qualname__.removesuffix(".Config")


def field_types(cls: type) -> dict[str, Any]:
    """The resolved annotations of a config class, ``Annotated`` kept (string annotations too)."""
    try:
        return typing.get_type_hints(cls, include_extras=True)
    except NameError as error:
        raise TypeError(f"cannot resolve the field types of {cls.__qualname__}: {error}") from error


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each field of ``cls`` (and of its bases), by field name."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__[:-1]):
        node = _class_node(klass)
        body = node.body if node is not None else []
        for statement, following in zip(body, body[1:]):
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                doc = _string(following)
                if doc is not None:
                    docs[statement.target.id] = inspect.cleandoc(doc)
    return docs


def config_doc(cls: type) -> str:
    """The docstring written in the class body (not the signature ``dataclass`` makes up)."""
    node = _class_node(cls)
    return (node and ast.get_docstring(node)) or ""


def _class_node(cls: type) -> ast.ClassDef | None:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # defined in a REPL or built at runtime: no docs to read
        return None
    return ast.parse(source).body[0]


def _string(statement: ast.stmt) -> str | None:
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        if isinstance(statement.value.value, str):
            return statement.value.value
    return None


def validate(cfg: Any) -> Any:
    """Check every field of the config tree ``cfg`` (types, constraints, ``check()`` rules); return it.

    A config class may define ``check(self)`` for rules across fields; it raises ``ConfigError``
    with a path relative to itself, and the error is re-raised with the full dotted path.
    """
    if not is_config(cfg):
        raise TypeError(f"validate() takes a dataclass config instance, got {describe_value(cfg)}")
    _check_config(cfg, "")
    return cfg


def _check_config(cfg: Any, path: str) -> None:
    types_ = field_types(type(cfg))
    for f in dataclasses.fields(cfg):
        _check(getattr(cfg, f.name), types_[f.name], join_path(path, f.name))
    check = getattr(cfg, "check", None)
    if check is not None:
        try:
            check()
        except ConfigError as error:
            raise error.under(path) from None


def _check(value: Any, tp: Any, path: str) -> None:
    base, constraints = split_annotated(tp)
    expected = describe_type(tp)  # the whole rule, constraints included, even when the type is wrong
    _check_type(value, base, path, expected)
    if value is not None and not all(c.holds(value) for c in constraints):
        raise ConfigError(path, value, expected)


def _check_type(value: Any, tp: Any, path: str, expected: str) -> None:
    origin = get_origin(tp)
    if tp is Any or tp is object:
        return
    if origin in _UNIONS:
        return _check_union(value, tp, path, expected)
    if is_config_type(tp):
        if not isinstance(value, tp):
            raise ConfigError(path, value, expected)
        return _check_config(value, path)
    if tp in (list, tuple, dict) or origin in (list, tuple, dict):
        return _check_container(value, tp, path, expected)
    if origin is not None and origin is not Literal:
        raise TypeError(f"config field '{path}': cannot check {type_name(tp)}; use list, tuple or dict")
    if not _is_instance(value, tp):
        raise ConfigError(path, value, expected)


def _is_instance(value: Any, tp: Any) -> bool:
    if get_origin(tp) is Literal:
        return any(type(value) is type(option) and value == option for option in get_args(tp))
    if tp is types.NoneType:
        return value is None
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, tp)


def _check_union(value: Any, tp: Any, path: str, expected: str) -> None:
    members = get_args(tp)
    for member in members:  # a config of one of the members: report errors from inside it
        if is_config_type(member) and isinstance(value, member):
            return _check_config(value, path)
    for member in members:
        try:
            return _check(value, member, path)
        except ConfigError:
            continue
    raise ConfigError(path, value, expected)


def _check_container(value: Any, tp: Any, path: str, expected: str) -> None:
    container = get_origin(tp) or tp
    if not isinstance(value, container):
        raise ConfigError(path, value, expected)
    if container is dict:
        key_type, value_type = get_args(tp) or (Any, Any)
        for key, item in value.items():
            _check(key, key_type, f"{path}[{key!r}]")
            _check(item, value_type, f"{path}[{key!r}]")
        return
    try:
        item_types = item_types_of(tp, len(value))
    except ValueError:
        raise ConfigError(path, value, expected) from None
    for i, (item, item_type) in enumerate(zip(value, item_types)):
        _check(item, item_type, f"{path}[{i}]")


def item_types_of(tp: Any, n: int) -> list[Any]:
    """The type of each of the ``n`` items of a list or tuple type; ValueError on a length mismatch."""
    args = get_args(tp)
    if not args:
        return [Any] * n
    if (get_origin(tp) or tp) is list or args[-1] is Ellipsis:
        return [args[0]] * n
    if len(args) != n:
        raise ValueError(f"{type_name(tp)} has {len(args)} items, not {n}")
    return list(args)


def split_annotated(tp: Any) -> tuple[Any, list[Constraint]]:
    """``Annotated[T, *rules]`` -> ``(T, constraints)``; any other type -> ``(tp, [])``."""
    if get_origin(tp) is Annotated:
        base, *metadata = get_args(tp)
        return base, [m for m in metadata if isinstance(m, Constraint)]
    return tp, []


def union_members(tp: Any) -> list[Any]:
    """The members of a union (``Annotated`` stripped), or ``[tp]`` for any other type."""
    base, _ = split_annotated(tp)
    if get_origin(base) in _UNIONS:
        return [split_annotated(member)[0] for member in get_args(base)]
    return [base]


def type_name(tp: Any) -> str:
    """A compact spelling of a field type: ``int (>= 1) | None``, ``LocalStore.Config``."""
    base, constraints = split_annotated(tp)
    if constraints:
        return f"{type_name(base)} ({', '.join(map(str, constraints))})"
    origin = get_origin(tp)
    if origin in _UNIONS:
        return " | ".join(type_name(member) for member in get_args(tp))
    if origin is Literal:
        return " | ".join(repr(option) for option in get_args(tp))
    if origin is not None:
        args = ", ".join("..." if arg is Ellipsis else type_name(arg) for arg in get_args(tp))
        return f"{origin.__name__}[{args}]"
    if tp is types.NoneType:
        return "None"
    return tp.__qualname__ if isinstance(tp, type) else repr(tp)


def describe_type(tp: Any) -> str:
    """What a field of type ``tp`` accepts, in words: ``an integer >= 1``."""
    base, constraints = split_annotated(tp)
    if constraints:
        return f"{describe_type(base)} {' and '.join(map(str, constraints))}"
    origin = get_origin(tp)
    if origin in _UNIONS:
        return " or ".join(describe_type(member) for member in get_args(tp))
    if origin is Literal:
        return "one of " + ", ".join(repr(option) for option in get_args(tp))
    words = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", types.NoneType: "None"}
    return words.get(tp) or type_name(tp)


def describe_value(value: Any) -> str:
    """A value and its type, short enough for one line: ``-1 (int)``."""
    if is_config(value):
        return type(value).__qualname__
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


def join_path(prefix: str, name: str) -> str:
    """``("store", "chunk_rows")`` -> ``store.chunk_rows``; index suffixes (``[0]``) join bare."""
    if not prefix or not name:
        return prefix or name
    return f"{prefix}{name}" if name.startswith("[") else f"{prefix}.{name}"
