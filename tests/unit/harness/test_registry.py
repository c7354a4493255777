"""The harness registry: construct-time rules run once per id on first make, clashes, unknown ids."""

from __future__ import annotations

import pytest

from harnesses.desktop import DesktopHarness
from tests.helpers.broken_plugins import Endless
from vlrl.harness import (
    Harness,
    HarnessContractError,
    HarnessError,
    check_harness,
    make,
    register,
    registered,
    resolve,
)
from vlrl.harness.registry import REGISTRY


class NoTasks(DesktopHarness):
    tasks = ["click-target"]  # noqa: RUF012 (a list, not the tuple the contract asks for)


class Unfinished(Harness):
    def reset(self, *, seed=None, options=None):
        raise NotImplementedError


def test_builtins_come_from_entry_points_and_are_checked_once(monkeypatch):
    assert {"desktop", "browser", "miniwob"} <= set(registered())
    checks = []
    monkeypatch.setattr(REGISTRY, "checker", lambda spec, factory: checks.append(spec.id))
    register("desktop-again", "harnesses.desktop:DesktopHarness")
    assert checks == []
    make("desktop-again").close()
    make("desktop-again").close()
    assert checks == ["desktop-again"]


@pytest.mark.parametrize(
    "factory, rule", [(NoTasks, "task names"), (Unfinished, "harness class"), (dict, "harness class")]
)
def test_broken_class_refused_at_registration(factory, rule):
    with pytest.raises(HarnessError, match=f"harness 'broken': rule '{rule}': "):
        register("broken", factory)
    assert "broken" not in registered()


def test_broken_path_refused_on_first_make():
    register("lazy-no-tasks", "tests.unit.harness.test_registry:NoTasks")
    with pytest.raises(HarnessError, match="harness 'lazy-no-tasks': rule 'task names': tasks=\\['click-target'\\]"):
        make("lazy-no-tasks")


def test_registering_over_an_id_needs_override():
    with pytest.raises(HarnessError, match="harness 'desktop': already registered as 'harnesses.desktop:Desk"):
        register("desktop", NoTasks)
    register("desktop", "harnesses.desktop:DesktopHarness")  # the entry point itself again: no clash
    assert resolve("desktop") is DesktopHarness


def test_unknown_id_lists_the_known_ones_and_a_bad_path_is_refused():
    with pytest.raises(HarnessError, match=r"harness 'nope': not registered; known: \[.*'desktop'"):
        make("nope")
    with pytest.raises(HarnessError, match="harness 'flat': entry point 'harnesses.desktop'; expected 'module:attr"):
        register("flat", "harnesses.desktop")


def test_a_broken_rule_names_itself():
    with pytest.raises(HarnessContractError, match="rule 'order': a fail action must terminate the episode") as error:
        check_harness(Endless)
    assert error.value.rule == "order" and isinstance(error.value, AssertionError)
