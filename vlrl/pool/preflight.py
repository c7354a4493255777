"""Every source's harness built once with its settings, before Ray starts.

The settings rule: the fields of ``EnvSettings`` that are set (``width``, ``height``, ``tasks`` as
a tuple, ``max_steps``) and every entry of ``params`` reach the harness constructor as keyword
arguments, on every env host; ``reset`` gets only the seed and, when an episode names its task
family, ``options={"task": name}``. A constructor that rejects a keyword or a value would
otherwise fail every episode on the env hosts, minutes in; here it fails at once, naming the
source's field, the harness and the keyword.

The harnesses are built in a short-lived subprocess (``python -m vlrl.pool.preflight``): a
harness module may import what the driver lacks (a browser driver, X tools) or leave threads and
child processes behind, and none of that should live in the driver. Constructors are cheap by
contract (a browser or a display starts on first ``reset``), so one subprocess checks every
source in about a second.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import pickle
import re
import subprocess
import sys
from typing import Any

from vlrl.config import ConfigError, DataSource, EnvSettings

_NAMED_FIELDS = frozenset(f.name for f in dataclasses.fields(EnvSettings)) - {"params"}
"""Settings that are ``EnvSettings`` fields; every other keyword is a ``params`` entry."""


def check_harness_settings(sources: list[DataSource], *, timeout_s: float = 120.0) -> None:
    """Build each source's harness with its settings in a subprocess; the first one refused
    raises ``ConfigError`` naming ``sources[i].env...``, the harness id, the keyword and the rule.

    The factories are resolved here, as the Harness Pool resolves them, and travel by value
    (cloudpickle), so a harness registered by the recipe's own module is checked too."""
    from ray import cloudpickle

    from vlrl.harness import resolve

    indices = [i for i, source in enumerate(sources) if source.env_pool is not None]  # external agents own their envs
    if not indices:
        return
    sources = [sources[i] for i in indices]
    factories = [resolve(source.codebase) for source in sources]
    for i, source, factory in zip(indices, sources, factories):
        unknown = _unknown_keywords(factory, source.env.as_kwargs())
        if unknown:
            accepted = sorted(_keywords(factory) or ())
            raise _error(i, source, unknown[0], f"its constructor takes no keyword {unknown[0]!r}",
                         f"a keyword the constructor takes, one of {accepted}")  # fmt: skip
    checks = cloudpickle.dumps([(factory, s.env.as_kwargs()) for factory, s in zip(factories, sources)])
    try:
        done = subprocess.run(
            [sys.executable, "-m", "vlrl.pool.preflight"], input=checks, capture_output=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(
            "sources", [s.codebase for s in sources], f"harnesses whose constructors return within {timeout_s:g} s"
        ) from None
    if done.returncode != 0:
        raise RuntimeError(
            f"the harness settings check could not run (exit {done.returncode}):\n{done.stderr.decode(errors='replace').strip()}"
        )
    errors = json.loads(done.stdout.decode().splitlines()[-1])
    for i, source, error in zip(indices, sources, errors):
        if error is not None:
            settings = source.env.as_kwargs()
            named = [k for k in settings if re.search(rf"\b{re.escape(k)}\b", error)]
            raise _error(i, source, named[0] if named else None, error, "a value the harness constructor accepts")


def _error(index: int, source: DataSource, keyword: str | None, error: str, expected: str) -> ConfigError:
    if keyword is None:
        path, value = f"sources[{index}].env", source.env.as_kwargs()
    elif keyword in _NAMED_FIELDS:
        path, value = f"sources[{index}].env.{keyword}", getattr(source.env, keyword)
    else:
        path, value = f"sources[{index}].env.params.{keyword}", source.env.params.get(keyword)
    return ConfigError(path, value, expected, hint=f"harness {source.codebase!r}: {error}; {RULE}")


RULE = "settings reach the harness constructor as keyword arguments (the EnvSettings fields set, and every params entry)"


def _unknown_keywords(factory: Any, settings: dict[str, Any]) -> list[str]:
    accepted = _keywords(factory)
    return [] if accepted is None else [k for k in settings if k not in accepted]


def _keywords(factory: Any) -> set[str] | None:
    """The keywords ``factory`` takes, or None when it takes any (``**kwargs``) or cannot be read."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _build(factory: Any, settings: dict[str, Any]) -> str | None:
    """None if the harness builds and closes with ``settings``, else its error as text."""
    try:
        factory(**settings).close()
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None


def _main() -> None:
    checks = pickle.loads(sys.stdin.buffer.read())
    print(json.dumps([_build(factory, settings) for factory, settings in checks]))


if __name__ == "__main__":
    _main()
