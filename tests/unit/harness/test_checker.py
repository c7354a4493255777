"""The behaviour rules of ``check_harness``: each broken harness fails with its rule named, and a
sound one passes every rule, the oracle's with its solve rate."""

from __future__ import annotations

import numpy as np
import pytest

from harnesses.desktop import DesktopHarness
from vlrl.harness import Action, Harness, HarnessContractError, check_harness
from vlrl.harness.checker import ORACLE_MIN_SOLVE_RATE, contract
from vlrl.harness.registry import run_contract


class NumpyReward(DesktopHarness):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, np.float64(reward), terminated, truncated, info


class NumpyTerminated(DesktopHarness):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, np.bool_(terminated), truncated, info


class NumpySuccess(DesktopHarness):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "success": np.bool_(info["success"])}


class IntReward(DesktopHarness):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, int(reward), terminated, truncated, info


class NoTaskInfo(DesktopHarness):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs, {key: value for key, value in info.items() if key != "task"}


class UndeclaredTask(DesktopHarness):
    tasks = ("click-target",)

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options or {"task": "fill-form"})
        return obs, info


class IgnoresTask(DesktopHarness):
    """Draws the family from the seed whatever the episode names (refusing only unknown names)."""

    def reset(self, *, seed=None, options=None):
        if (options or {}).get("task") not in (None, *self.tasks):
            raise ValueError(f"unknown task {options['task']!r}")
        return super().reset(seed=seed)


class FixedScreen(DesktopHarness):
    """Takes width and height but draws at its default size."""

    def __init__(self, *, width=320, height=240, **settings):
        super().__init__(**settings)


class DeclaresAnotherSize(DesktopHarness):
    """Declares a 200x150 default but draws at the desktop's own default size."""

    def __init__(self, *, width=200, height=150, **settings):
        super().__init__(**settings)


class FailingOracle(DesktopHarness):
    def oracle(self):
        return Action.fail("gave up")


class OffScreenOracle(DesktopHarness):
    def oracle(self):
        return Action.click(self.settings.width + 1, 0)


class EvenSeedOracle(DesktopHarness):
    """An oracle that solves the episodes of even seeds and gives up on odd ones."""

    def reset(self, *, seed=None, options=None):
        self.seed = seed
        return super().reset(seed=seed, options=options)

    def oracle(self):
        return super().oracle() if self.seed % 2 == 0 else Action.fail("odd seed")


class NoScript(DesktopHarness):
    def oracle(self):
        return None


class NoOracle(NoScript):
    oracle = Harness.oracle  # the harness defines none


NUMPY_BOOL = f"numpy.{type(np.bool_(True)).__name__}"  # numpy.bool (numpy.bool_ before numpy 2)


@pytest.mark.parametrize(
    "factory, message",
    [
        (NumpyReward, "reward is numpy.float64; expected a Python float (convert it with float(...))"),
        (NumpyTerminated, f"terminated is {NUMPY_BOOL}; expected a Python bool (convert it with bool(...))"),
        (NumpySuccess, f"info['success'] is {NUMPY_BOOL}; expected a Python bool (convert it with bool(...))"),
        (IntReward, "reward is int; expected a Python float"),
    ],
)
def test_a_numpy_or_wrong_scalar_is_named_with_its_type(factory, message):
    with pytest.raises(HarnessContractError) as error:
        check_harness(factory)
    assert str(error.value) == f"rule 'types': {message}"


@pytest.mark.parametrize(
    "factory, rule, message",
    [
        (NoTaskInfo, "task info", r"reset info must name the episode's task family: info\['task'\] is None"),
        (UndeclaredTask, "task info", r"reset info\['task'\]='fill-form'; expected one of \('click-target',\)"),
        (IgnoresTask, "tasks", r"reset\(options=\{'task': '[a-z-]+'\}\) ran a '[a-z-]+' episode"),
        (FailingOracle, "oracle", r"the oracle solved 0 of 8 episodes \(seeds \[0, 1, 2, 3, 4, 5, 6, 7\]\), a rate of 0%"),
        (OffScreenOracle, "oracle", "seed 0: the harness refused its own oracle's Action"),
    ],
)
def test_a_broken_harness_fails_with_the_rule_named(factory, rule, message):
    with pytest.raises(HarnessContractError, match=f"rule '{rule}': {message}") as error:
        check_harness(factory)
    assert error.value.rule == rule


def test_the_screen_must_have_the_size_the_settings_give():
    settings = {"width": 200, "height": 150}
    with pytest.raises(HarnessContractError, match="rule 'screen size': the settings give width=200, height=150 but"):
        check_harness(FixedScreen, settings=settings)
    check_harness(FixedScreen, settings={"width": 320})  # what it draws anyway
    assert "screen size: width=200, height=150 as set" in list(contract(DesktopHarness, settings=settings))


def test_on_its_defaults_the_screen_must_have_the_size_the_constructor_declares():
    with pytest.raises(
        HarnessContractError, match="rule 'screen size': the constructor's defaults are width=200, height=150 but a screenshot is 320x240"
    ):
        check_harness(DeclaresAnotherSize)
    assert "screen size: width=320, height=240 by default" in list(contract(FixedScreen))
    check_harness(DeclaresAnotherSize, settings={"width": 320, "height": 240})  # settings rule over defaults
    assert "screen size: no width/height set or declared" in list(contract(lambda: DesktopHarness()))


def test_the_oracle_must_solve_at_least_the_threshold():
    assert ORACLE_MIN_SOLVE_RATE == 0.5
    assert "oracle: solved 4/8 episodes (50%)" in list(contract(EvenSeedOracle))
    with pytest.raises(HarnessContractError, match=r"rule 'oracle': the oracle solved 1 of 3 episodes .* 33%"):
        check_harness(EvenSeedOracle, oracle_seeds=(0, 1, 3))


def test_a_sound_harness_passes_every_rule_and_reports_the_oracle_rate():
    assert list(contract(DesktopHarness, seeds=(0, 1, 2))) == [
        "types",
        "task info",
        "screen size: width=320, height=240 by default",
        "determinism",
        "tasks",
        "order",
        "bounds",
        "oracle: solved 8/8 episodes (100%)",
        "replay: 3 screens identical on a second instance",
        "fork: 1 screen(s) after a fork identical on the fork and the original",
    ]
    assert "oracle: no script for the episodes of seeds [0, 1]" in list(contract(NoScript, oracle_seeds=(0, 1)))
    assert "oracle: none" in list(contract(NoOracle))


def test_vlrl_check_runs_the_new_rules_on_a_registered_id():
    rules = list(run_contract("desktop"))
    assert rules[:3] == ["harness class", "task names", "thread_bound"]
    assert {"task info", "screen size: width=320, height=240 by default", "oracle: solved 8/8 episodes (100%)"} <= set(rules)
