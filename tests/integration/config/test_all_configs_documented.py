"""Every component config in ``vlrl`` keeps the config style (STYLE.md, item 1).

A class named ``Config`` that is a dataclass, nested or not, must be ``kw_only`` and ``slots``
and have a docstring under every field: those docstrings are the reference that
``vlrl train RECIPE --print-config`` prints.
"""

import dataclasses
import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from types import ModuleType

import vlrl
from vlrl.config import field_docs

# Modules of optional extras (pyproject [project.optional-dependencies]); a vlrl module that
# needs one is skipped when it is not installed.
OPTIONAL = {"transfer_queue", "transferqueue", "tensordict", "vllm", "playwright", "miniwob", "selenium"}


def _modules() -> list[ModuleType]:
    infos = pkgutil.walk_packages(vlrl.__path__, f"{vlrl.__name__}.", onerror=lambda name: None)
    modules = []
    for name in [vlrl.__name__, *(info.name for info in infos)]:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as error:
            if (error.name or "").partition(".")[0] not in OPTIONAL:
                raise
    return modules


def _configs(owner: type | ModuleType, module: str) -> list[type]:
    """Classes named ``Config`` defined in ``owner`` or in classes nested in it."""
    prefix = f"{owner.__qualname__}." if inspect.isclass(owner) else ""
    found = []
    for name, value in vars(owner).items():
        if inspect.isclass(value) and value.__module__ == module and value.__qualname__ == prefix + name:
            if name == "Config" and dataclasses.is_dataclass(value):
                found.append(value)
            found.extend(_configs(value, module))
    return found


def _problems(cls: type) -> list[str]:
    where = f"{cls.__module__}.{cls.__qualname__}"
    fields = dataclasses.fields(cls)
    problems = []
    if "__slots__" not in vars(cls):
        problems.append(f"{where}: declare it with @dataclass(kw_only=True, slots=True) (slots missing)")
    if not all(f.kw_only for f in fields):
        problems.append(f"{where}: declare it with @dataclass(kw_only=True, slots=True) (kw_only missing)")
    docs = field_docs(cls)
    undocumented = [f.name for f in fields if not docs.get(f.name)]
    if undocumented:
        problems.append(f"{where}: write a docstring under field(s) {', '.join(undocumented)}")
    return problems


def test_every_config_is_kw_only_slotted_and_documented():
    configs = [cls for module in _modules() for cls in _configs(module, module.__name__)]
    problems = [problem for cls in configs for problem in _problems(cls)]
    assert not problems, "\n".join(problems)


class _Sloppy:
    @dataclass
    class Config:
        size: int = 1

        name: str = ""
        """Documented."""


def test_the_check_finds_nested_configs_and_reports_each_problem():
    assert _configs(_Sloppy, __name__) == [_Sloppy.Config]
    where = f"{__name__}._Sloppy.Config"
    assert _problems(_Sloppy.Config) == [
        f"{where}: declare it with @dataclass(kw_only=True, slots=True) (slots missing)",
        f"{where}: declare it with @dataclass(kw_only=True, slots=True) (kw_only missing)",
        f"{where}: write a docstring under field(s) size",
    ]
