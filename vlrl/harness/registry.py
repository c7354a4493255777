"""Harness codebases by id, on the generic ``vlrl.registry``: registered explicitly or installed
in the ``vlrl.harnesses`` entry-point group, and checked once per id by the construct-time rules
of ``checker.check_factory`` (at ``register`` for a class, on first ``resolve``/``make`` for a
path). Those rules are the cheap ones; ``checker`` says why the full suite runs only in contract
tests and ``vlrl check harness ID``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from vlrl.harness.base import Harness
from vlrl.harness.checker import check_factory, contract, factory_rules
from vlrl.harness.errors import HarnessError
from vlrl.registry import HARNESSES, PluginSpec, Registry


def _error(harness_id: str, message: str) -> HarnessError:
    return HarnessError(f"harness {harness_id!r}: {message}")


REGISTRY = Registry("harness", HARNESSES, check_factory, error=_error)


def register(
    harness_id: str,
    entry_point: Callable[..., Harness] | str,
    *,
    override: bool = False,
    check_settings: Mapping[str, Any] | None = None,
) -> PluginSpec:
    """Register a harness class/factory, or a ``"module:attr"`` path resolved on first use;
    ``check_settings`` are the settings ``vlrl check`` builds its instances with."""
    return REGISTRY.register(harness_id, entry_point, override=override, check_settings=check_settings)


def registered() -> list[str]:
    """Ids registered explicitly or installed as entry points."""
    return REGISTRY.registered()


def resolve(harness_id: str) -> Callable[..., Harness]:
    """The checked factory of ``harness_id``."""
    return REGISTRY.resolve(harness_id)


def make(harness_id: str, **settings: Any) -> Harness:
    """Build one harness instance with the given environment settings."""
    harness = resolve(harness_id)(**settings)
    if not isinstance(harness, Harness):
        raise HarnessError(f"harness {harness_id!r} built a {type(harness).__name__}, not a vlrl Harness")
    return harness


def run_contract(harness_id: str, *, settings: Mapping[str, Any] | None = None) -> Iterator[str]:
    """The whole contract on ``harness_id`` (``vlrl check harness``): the construct-time rules, then
    ``check_harness``'s on instances built with ``settings`` (default: the id's ``check_settings``),
    yielding each rule once it passed and raising ``ContractError`` at the first broken one.

    ``harness_id`` is a registered id or a ``module:Class`` path, imported as the env hosts would
    (from ``sys.path``: installed, or on ``PYTHONPATH``), so a harness is checked before anything
    registers it."""
    if ":" in harness_id:
        spec = PluginSpec(kind=REGISTRY.kind, id=harness_id, entry_point=harness_id, checker=check_factory)
    else:
        spec = REGISTRY.spec(harness_id)
    factory = REGISTRY.load(spec)
    settings = dict(spec.check_settings or {}) if settings is None else dict(settings)
    yield from factory_rules(factory)
    yield from contract(factory, settings=settings)
