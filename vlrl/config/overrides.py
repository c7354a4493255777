"""``--set a.b=c`` overrides, each value parsed by the annotated type of the field it sets.

Values: ``int``; ``float`` (``1e-3``); ``bool`` (``true/false/1/0/yes/no``); ``str`` as written;
a ``Literal`` option; ``none``/``null`` for an optional field; lists and tuples as JSON
(``[1, 2]``), in brackets with bare words (``[distinct, click-target]``) or comma-separated
(``1,2``); dicts as JSON or ``{key: value, ...}`` with bare words. A field whose type is a
config, or a union of configs, takes the name of the config to use (``store=RayStore`` picks
``RayStore.Config`` with its defaults); later overrides then set its fields
(``store.namespace=eval``). Selecting the config that is already there keeps its values.
Configs inside a list are reached by index (``sources[0].weight=2``); a list itself is set
whole. A key of a dict field is reached as one more dotted name
(``sources[0].env.params.distractors=2``), its value parsed by the dict's value type: where that
allows several (``int | float | str | bool``), an integer, a number, ``true``/``false``, else the
word as written.

A path that has moved (``vlrl.config.moved``: ``trainer.trainer.lr`` is now ``optim.lr``) fails
with an error naming the new path.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import types
from collections.abc import Iterable
from pathlib import PurePath
from typing import Any, Literal, TypeVar, get_args, get_origin

from vlrl.config.schema import (
    ConfigError,
    config_name,
    describe_type,
    field_types,
    is_config,
    is_config_type,
    item_types_of,
    join_path,
    split_annotated,
    union_members,
    validate,
)
from vlrl.config.moved import moved

C = TypeVar("C")

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}
_NONE = {"none", "null"}


def apply_overrides(cfg: C, overrides: Iterable[str]) -> C:
    """A validated deep copy of ``cfg`` with each ``dotted.key=value`` applied in order."""
    cfg = copy.deepcopy(cfg)
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(key, item, "an override KEY=VALUE, such as store.chunk_rows=1024", got=repr(item))
        _set(cfg, key, raw)
    return validate(cfg)


def _set(root: Any, key: str, raw: str) -> None:
    try:
        _resolve_and_set(root, key, raw)
    except ConfigError as error:
        found = moved(key)
        if found is None or found[0] == key:
            raise
        new, entry = found
        hint = entry.note or f"use --set {new}={raw.strip()}"
        raise ConfigError(key, raw, f"its new path {new!r}", got="a path that has moved", hint=hint) from error


def _resolve_and_set(root: Any, key: str, raw: str) -> None:
    *parents, name = key.split(".")
    node, path = root, ""
    types_: list[Any] = [type(root)]  # the declared type of each node on the way (a dict's, for its keys)
    for part in parents:
        node, path, tp = _descend(node, part, path, types_[-1])
        types_.append(tp)
    if isinstance(node, dict):
        key_type, value_type = _key_and_value_types(types_[-1])
        try:
            dict_key = _parse_value(name, key_type)
        except ValueError:
            raise ConfigError(join_path(path, name), name, f"a key of type {describe_type(key_type)}") from None
        where = f"{path}[{dict_key!r}]"
        node[dict_key] = _guess(raw) if value_type is Any else _parse(raw, value_type, where, node.get(dict_key))
        return
    tp = _field_type(node, name, path)
    setattr(node, name, _parse(raw, tp, join_path(path, name), getattr(node, name)))


def _descend(node: Any, part: str, path: str, node_type: Any) -> tuple[Any, str, Any]:
    """What is under ``part`` of ``node``, with its declared type: a field, an item of a list of
    configs (``sources[0]``), or the value of a dict's key."""
    name, *indices = part.split("[")
    if isinstance(node, dict) and not indices:
        _, value_type = _key_and_value_types(node_type)
        matches = [k for k in node if str(k) == name]
        if not matches:
            keys = ", ".join(map(str, node))
            raise ConfigError(join_path(path, name), name, f"a key of {path}: {keys}", got=f"unknown key {name!r}")
        return node[matches[0]], f"{path}[{matches[0]!r}]", value_type
    tp = _field_type(node, name, path)
    node, path = getattr(node, name), join_path(path, name)
    for index in indices:
        digits = index.removesuffix("]")
        found = index.endswith("]") and digits.isdigit() and isinstance(node, (list, tuple))
        if not (found and int(digits) < len(node)):
            raise ConfigError(path, node, f"a list with an item [{digits}]")
        node, path = node[int(digits)], f"{path}[{digits}]"
        tp = _item_type(tp)
    return node, path, tp


def _item_type(tp: Any) -> Any:
    """The declared type of an item of the list type ``tp`` (``Any`` when it does not say)."""
    args = _container_args(tp, (list, tuple))
    return split_annotated(args[0])[0] if args else Any


def _key_and_value_types(tp: Any) -> tuple[Any, Any]:
    """The key and value types of the dict type ``tp`` (``str`` and ``Any`` when it does not say)."""
    args = _container_args(tp, (dict,))
    return (args[0], args[1]) if len(args) == 2 else (str, Any)


def _container_args(tp: Any, kinds: tuple[type, ...]) -> tuple[Any, ...]:
    """The type arguments of the member of ``tp`` (a union, or one type) that is one of ``kinds``."""
    for member in union_members(tp):
        if (get_origin(member) or member) in kinds:
            return get_args(member)
    return ()


def _field_type(node: Any, name: str, path: str) -> Any:
    """The annotated type of field ``name`` of the config at ``path``; ConfigError if there is none."""
    if not is_config(node):
        expected = f"a config with a field {name!r}"
        hint = f"select one first with {path}=NAME" if node is None else ""
        raise ConfigError(path, node, expected, hint=hint)
    names = [f.name for f in dataclasses.fields(node)]
    if name not in names:
        close = _suggest(name, names)
        raise ConfigError(
            join_path(path, name),
            name,
            f"a field of {type(node).__qualname__}: {', '.join(names)}",
            got=f"unknown key {name!r}",
            hint=f"did you mean {join_path(path, close)!r}?" if close else "",
        )
    return field_types(type(node))[name]


def _suggest(word: str, options: list[str]) -> str | None:
    """The option a mistyped ``word`` most likely meant: its start in any case, or a close spelling."""
    starts = [option for option in options if word and option.lower().startswith(word.lower())]
    close = starts or difflib.get_close_matches(word, options, n=1)
    return close[0] if close else None


def _parse(raw: str, tp: Any, path: str, current: Any) -> Any:
    members = union_members(tp)
    configs = {config_name(m): m for m in members if is_config_type(m)}
    if configs:
        return _select_config(raw, configs, types.NoneType in members, path, current)
    try:
        return _parse_value(raw, tp)
    except ValueError:
        raise ConfigError(path, raw, describe_type(tp), got=repr(raw)) from None


def _select_config(raw: str, configs: dict[str, type], optional: bool, path: str, current: Any) -> Any:
    name = raw.strip()
    if optional and name.lower() in _NONE:
        return None
    cls = configs.get(name) or next((c for c in configs.values() if c.__qualname__ == name), None)
    if cls is None:
        options = [*configs, *(["none"] if optional else [])]
        close = _suggest(name, options)
        hint = f"did you mean {close!r}?" if close else ""
        raise ConfigError(path, raw, f"the name of a config: {', '.join(options)}", got=repr(raw), hint=hint)
    if type(current) is cls:
        return current
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if required:
        expected = f"a config with a default for every field; {cls.__qualname__} requires {', '.join(required)}"
        raise ConfigError(path, raw, expected, got=repr(raw), hint="set it in a recipe instead")
    return cls()


def _parse_value(raw: str, tp: Any) -> Any:
    """``raw`` as a value of type ``tp``; ValueError when it is not one."""
    tp, _ = split_annotated(tp)
    origin = get_origin(tp)
    text = raw.strip()
    members = union_members(tp)
    if len(members) > 1:
        if types.NoneType in members and text.lower() in _NONE:
            return None
        if bool in members and text.lower() in ("true", "false"):
            return text.lower() == "true"
        for member in sorted(members, key=lambda m: m is str or m is Any):  # a word is a string last
            try:
                return _parse_value(raw, member)
            except ValueError:
                continue
        raise ValueError(raw)
    if tp is Any or tp is object or tp is str:
        return raw
    if tp is types.NoneType and text.lower() in _NONE:
        return None
    if origin is Literal:
        for option in get_args(tp):
            if (option if isinstance(option, str) else str(option)) == raw:
                return option
        raise ValueError(raw)
    if tp is bool and text.lower() in _TRUE | _FALSE:
        return text.lower() in _TRUE
    if tp is int:
        return int(text)
    if tp is float:
        return float(text)
    if tp in (list, tuple, dict) or origin in (list, tuple, dict):
        return _parse_container(text, tp)
    if isinstance(tp, type) and issubclass(tp, PurePath):
        return tp(raw)
    raise ValueError(raw)


def _parse_container(text: str, tp: Any) -> Any:
    container = get_origin(tp) or tp
    if text.startswith(("[", "{")):
        try:
            return _from_json(json.loads(text), tp)
        except json.JSONDecodeError:
            return _parse_bare(text, tp)
    if container is dict:
        raise ValueError(text)
    items = [item.strip() for item in text.split(",")] if text else []
    parsed = [_parse_value(item, t) for item, t in zip(items, item_types_of(tp, len(items)))]
    return parsed if container is list else tuple(parsed)


def _guess(raw: str) -> Any:
    """A value of no declared type: an integer, a number, ``true``/``false``, else the word as written."""
    return _parse_value(raw, int | float | bool | str)


def _parse_bare(text: str, tp: Any) -> Any:
    """``[a, b]`` or ``{k: v, ...}`` written without JSON's quotes: each item parsed by its type."""
    container = get_origin(tp) or tp
    body = text[1:-1].strip() if text[-1:] in "]}" and len(text) > 1 else None
    if body is None or (text[0] == "{") != (container is dict):
        raise ValueError(text)
    items = [item.strip().strip("'\"") for item in body.split(",")] if body else []
    if container is dict:
        key_type, value_type = get_args(tp) or (str, Any)
        pairs = [item.split(":", 1) for item in items]
        if any(len(pair) != 2 for pair in pairs):
            raise ValueError(text)
        value = _guess if value_type is Any else (lambda v: _parse_value(v, value_type))
        return {_parse_value(k.strip(), key_type): value(v.strip()) for k, v in pairs}
    if container not in (list, tuple):
        raise ValueError(text)
    parsed = [_parse_value(item, t) for item, t in zip(items, item_types_of(tp, len(items)))]
    return parsed if container is list else tuple(parsed)


def _from_json(data: Any, tp: Any) -> Any:
    """Decoded JSON shaped to ``tp``: tuples where tuples are declared, dict keys parsed."""
    tp, _ = split_annotated(tp)
    container = get_origin(tp) or tp
    if isinstance(data, list) and container in (list, tuple):
        items = [_from_json(item, t) for item, t in zip(data, item_types_of(tp, len(data)))]
        return items if container is list else tuple(items)
    if isinstance(data, dict) and container is dict:
        key_type, value_type = get_args(tp) or (Any, Any)
        return {_parse_value(key, key_type): _from_json(item, value_type) for key, item in data.items()}
    return data  # scalars (and mismatched shapes) as decoded; validate() reports the mismatch
