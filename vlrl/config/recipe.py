"""Recipes: a run is a Python function that returns its top-level config.

``load_recipe("examples/train_click.py:small", ["steps=4"])`` imports the file by path (it
need not be in a package), calls ``small()`` (``recipe()`` when no function is named), applies
the ``--set`` overrides and validates the result. Classes and functions the file defines travel
to Ray actors by value, so a recipe may define its own harness or encoder. A variant is a function that calls its base
recipe and changes what differs, so the difference between two runs reads as code::

    def recipe() -> TrainJob.Config:
        return base_recipe([DataSource(codebase="desktop")], run_dir="runs/mine")

    def long_context() -> TrainJob.Config:
        cfg = recipe()
        cfg.micro_batches.max_tokens_per_micro_batch = 65536
        return cfg
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from vlrl.config.overrides import apply_overrides
from vlrl.config.schema import describe_value, is_config

DEFAULT_FUNCTION = "recipe"

_loads = itertools.count()


class RecipeError(ValueError):
    """A recipe that cannot be loaded: no such file or function, or it returned no config."""


def load_recipe(spec: str, overrides: Iterable[str] = ()) -> Any:
    """The validated config built by the recipe ``spec`` (``path.py`` or ``path.py:function``)."""
    path, sep, name = spec.rpartition(":")
    if not sep:
        path, name = spec, ""
    name = name or DEFAULT_FUNCTION
    module = _import_file(Path(path))
    function = getattr(module, name, None)
    if not callable(function):
        found = sorted(
            attr
            for attr, value in vars(module).items()
            if inspect.isfunction(value) and value.__module__ == module.__name__ and not attr.startswith("_")
        )
        listed = ", ".join(found) if found else "none"
        raise RecipeError(f"recipe {path}: no function {name!r}; functions defined there: {listed}")
    cfg = function()
    if not is_config(cfg):
        raise RecipeError(
            f"recipe {path}:{name}: returned {describe_value(cfg)}; expected a config (a dataclass instance)"
        )
    return apply_overrides(cfg, overrides)


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise RecipeError(f"recipe file not found: {path}")
    if path.suffix != ".py":
        raise RecipeError(f"recipe {path}: expected a Python file (.py)")
    # A fresh module per load: two recipes named recipe.py never share a module or its classes.
    stem = re.sub(r"\W", "_", path.stem)
    name = f"vlrl_recipe_{next(_loads)}_{stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and get_type_hints look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    _ship_by_value(module)
    return module


def _ship_by_value(module: ModuleType) -> None:
    """What a recipe defines (a harness or encoder class) reaches Ray actors by value: their
    processes cannot import a recipe file by its generated module name."""
    try:
        from ray import cloudpickle
    except ImportError:  # no Ray, no actors to ship to
        return
    cloudpickle.register_pickle_by_value(module)
