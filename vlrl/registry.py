"""One registry shape for every plug-in kind: harnesses, vision encoders, and model families next.

A ``Registry`` maps ids to ``PluginSpec`` records, each registered explicitly or installed as an
entry point of the kind's group (gymnasium's ``registration.py`` shape). An entry point is a
callable or a ``"module:attr"`` path, loaded lazily. The kind's contract check runs once per
registration: at ``register`` for a callable (a broken one is never registered), on first
``resolve``/``make`` for a path or an installed entry point, so a broken plug-in fails with its
kind, id and broken rule where it is named, not deep inside a run. Thread-safe: env hosts and
engines resolve from several threads. Imports nothing else of vlrl (it sits at the bottom).
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Any

from vlrl.errors import PicklesWhole

HARNESSES = "vlrl.harnesses"
"""Entry-point group of harness codebases (``vlrl.harness.registry``)."""
ENCODERS = "vlrl.encoders"
"""Entry-point group of vision encoders (``encoders.registry``)."""
MODELS = "vlrl.models"
"""Entry-point group reserved for model families (the next plug-in kind)."""


class ContractError(PicklesWhole, Exception):
    """A plug-in breaks one named rule of its kind's contract (raised by checkers)."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"rule {rule!r}: {detail}")
        self.rule = rule
        self.detail = detail


class RegistryError(LookupError):
    """The default error of a registry: an unknown, clashing, unloadable or broken plug-in."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PluginSpec:
    """One registered id: what it names and how it is checked."""

    kind: str
    """Plug-in kind, as errors name it ("harness", "encoder")."""
    id: str
    """The id configs and ``make`` use."""
    entry_point: Callable[..., Any] | str
    """The factory, or a ``"module:attr"`` path loaded on first use."""
    version: str | None = None
    """Version of the distribution that installed the entry point, else the one registered with it."""
    checker: Callable[[PluginSpec, Callable[..., Any]], None]
    """The kind's contract check of the loaded factory: raises ``ContractError``."""
    check_settings: Mapping[str, Any] | None = None
    """Settings of the instance the check builds (None: the kind's default)."""

    def __post_init__(self) -> None:
        if self.check_settings is not None:
            object.__setattr__(self, "check_settings", MappingProxyType(dict(self.check_settings)))


class Registry:
    """The plug-ins of one kind: explicit registrations over the ``group``'s entry points."""

    def __init__(
        self,
        kind: str,
        group: str,
        checker: Callable[[PluginSpec, Callable[..., Any]], None],
        *,
        error: Callable[[str, str], Exception] | None = None,
    ) -> None:
        """``error(id, message)`` builds the kind's exception (default: ``RegistryError`` naming kind and id)."""
        self.kind = kind
        self.group = group
        self.checker = checker
        self._error = error or (lambda plugin_id, message: RegistryError(f"{kind} {plugin_id!r}: {message}"))
        self._lock = threading.RLock()
        self._specs: dict[str, PluginSpec] = {}
        self._installed: dict[str, PluginSpec] | None = None
        self._loaded: dict[str, Callable[..., Any]] = {}  # ids whose current spec passed the check
        self._listeners: list[Callable[[str], None]] = []

    def on_register(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(id)`` after every later registration: another registry keyed by these
        ids (Gymnasium's, ``vlrl.gym``) follows without this one importing it."""
        self._listeners.append(listener)

    def register(
        self,
        plugin_id: str,
        entry_point: Callable[..., Any] | str,
        *,
        override: bool = False,
        version: str | None = None,
        check_settings: Mapping[str, Any] | None = None,
    ) -> PluginSpec:
        """Register ``entry_point`` as ``plugin_id``; a callable is checked now, a path on first use.

        Registering the same plug-in again (the same path, or a class or function defined at the
        same place: a recipe loaded twice) replaces it; any other clash needs ``override=True``.
        """
        if not isinstance(plugin_id, str) or not plugin_id:
            raise self._error(str(plugin_id), f"{self.kind} id must be a non-empty string, got {plugin_id!r}")
        if isinstance(entry_point, str) and ":" not in entry_point:
            raise self._error(plugin_id, f"entry point {entry_point!r}; expected 'module:attribute'")
        spec = PluginSpec(
            kind=self.kind,
            id=plugin_id,
            entry_point=entry_point,
            version=version,
            checker=self.checker,
            check_settings=check_settings,
        )
        with self._lock:
            existing = self._specs.get(plugin_id) or self._entry_points().get(plugin_id)
            if existing is not None and not override and not _same_plugin(existing.entry_point, entry_point):
                raise self._error(
                    plugin_id, f"already registered as {existing.entry_point!r}; pass override=True to replace it"
                )
            unchanged = existing is not None and existing.entry_point == entry_point
            if unchanged and existing.check_settings == spec.check_settings:
                return existing
            if callable(entry_point):
                self._check(spec, entry_point)
            self._specs[plugin_id] = spec
            self._loaded.pop(plugin_id, None)
            if callable(entry_point):
                self._loaded[plugin_id] = entry_point
        for listener in self._listeners:
            listener(plugin_id)
        return spec

    def registered(self) -> list[str]:
        """Ids registered explicitly or installed as entry points."""
        with self._lock:
            return sorted(set(self._specs) | set(self._entry_points()))

    def spec(self, plugin_id: str) -> PluginSpec:
        """The record of ``plugin_id``; an unknown id is an error listing the known ones."""
        with self._lock:
            found = self._specs.get(plugin_id) or self._entry_points().get(plugin_id)
            if found is None:
                raise self._error(plugin_id, f"not registered; known: {self.registered()}")
            return found

    def resolve(self, plugin_id: str) -> Callable[..., Any]:
        """The checked factory of ``plugin_id``, loading and checking a path on first use."""
        with self._lock:
            if plugin_id in self._loaded:
                return self._loaded[plugin_id]
            spec = self.spec(plugin_id)
            target = self.load(spec)
            self._check(spec, target)
            self._loaded[plugin_id] = target
            return target

    def make(self, plugin_id: str, **settings: Any) -> Any:
        """An instance of ``plugin_id`` built with ``settings``."""
        return self.resolve(plugin_id)(**settings)

    def load(self, spec: PluginSpec) -> Callable[..., Any]:
        """The factory ``spec`` names, imported but not contract-checked (``vlrl check`` runs the
        full suite on it)."""
        if not isinstance(spec.entry_point, str):
            return spec.entry_point
        module_name, _, attr = spec.entry_point.partition(":")
        try:
            target = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as error:
            raise self._error(spec.id, f"cannot load {spec.entry_point}: {error}") from error
        if not callable(target):
            raise self._error(spec.id, f"rule 'callable': {spec.entry_point} is {target!r}, not a callable")
        return target

    def _check(self, spec: PluginSpec, target: Callable[..., Any]) -> None:
        try:
            spec.checker(spec, target)
        except ContractError as error:
            raise self._error(spec.id, str(error)) from error

    def _entry_points(self) -> dict[str, PluginSpec]:
        # Read once: scanning every installed distribution's metadata is slow.
        if self._installed is None:
            self._installed = {
                ep.name: PluginSpec(
                    kind=self.kind,
                    id=ep.name,
                    entry_point=ep.value,
                    version=ep.dist.version if ep.dist is not None else None,
                    checker=self.checker,
                )
                for ep in entry_points(group=self.group)
            }
        return self._installed


def _same_plugin(old: Callable[..., Any] | str, new: Callable[..., Any] | str) -> bool:
    if isinstance(old, str) or isinstance(new, str):
        return old == new
    return old is new or (_origin(old) is not None and _origin(old) == _origin(new))


def _origin(target: Callable[..., Any]) -> tuple[str, str] | None:
    try:
        return getattr(target, "__qualname__", ""), inspect.getfile(target)
    except TypeError:  # a builtin or an instance: no source file
        return None
