"""The desktop harness keeps the harness contract: the shared checker, registration, settings
validation naming the field, episode order, and ``done``/``fail``/truncation semantics."""

from __future__ import annotations

import pytest

from harnesses.desktop import DesktopHarness
from vlrl.harness import Action, ActionError, HarnessError, check_harness, make


def test_shared_checker_passes():
    check_harness(lambda: DesktopHarness())


def test_small_screen_passes_checker_too():
    check_harness(lambda: DesktopHarness(width=160, height=120, tasks=("fill-form", "scroll-find")))


def test_registry_builds_it_with_settings():
    harness = make("desktop", width=400, height=300, max_steps=4)
    obs, info = harness.reset(seed=0)
    assert isinstance(harness, DesktopHarness)
    assert obs.screenshot.shape == (300, 400, 3)
    assert info["task"] in DesktopHarness.tasks and info["success"] is False
    harness.close()


def test_at_least_eight_families_listed():
    assert len(DesktopHarness.tasks) >= 8
    assert DesktopHarness.tasks[0] == "click-target"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"width": 100}, r"width=100; expected an int in \[160, 1920\]"),
        ({"width": 2000}, "width=2000"),
        ({"width": 320.0}, "width=320.0"),
        ({"height": 119}, r"height=119; expected an int in \[120, 1080\]"),
        ({"height": True}, "height=True"),
        ({"max_steps": 0}, "max_steps=0"),
        ({"distractors": 9}, r"distractors=9; expected an int in \[0, 5\]"),
        ({"tasks": ("click-target", "nope")}, r"tasks: unknown \['nope'\]; valid tasks are \['click-target'"),
        ({"tasks": "click-target"}, "tasks='click-target'; expected a non-empty tuple"),
        ({"tasks": ()}, r"tasks=\(\)"),
    ],
)
def test_bad_settings_name_the_field(settings, message):
    with pytest.raises(ValueError, match=message):
        DesktopHarness(**settings)


def test_reset_options_are_checked():
    harness = DesktopHarness(tasks=("type-field", "scroll-find"))
    with pytest.raises(ValueError, match=r"'nope' is not a desktop task family; expected one of \['click-target'"):
        harness.reset(seed=0, options={"task": "nope"})
    with pytest.raises(ValueError, match=r"options \['level'\] are unknown"):
        harness.reset(seed=0, options={"level": 2})
    with pytest.raises(ValueError, match="seed='1'"):
        harness.reset(seed="1")


def test_seed_draws_among_the_allowed_tasks_and_options_name_any():
    harness = DesktopHarness(tasks=("type-field", "scroll-find"))
    drawn = {harness.reset(seed=seed)[1]["task"] for seed in range(20)}
    assert drawn == {"type-field", "scroll-find"}
    assert harness.reset(seed=0, options={"task": "fill-form"})[1]["task"] == "fill-form"


def test_step_order_is_enforced(harness):
    fresh = DesktopHarness()
    with pytest.raises(HarnessError, match="step before reset"):
        fresh.step(Action.wait())
    with pytest.raises(HarnessError, match="step before reset"):
        fresh.oracle()
    harness.reset(seed=0)
    harness.step(Action.fail("give up"))
    with pytest.raises(HarnessError, match="episode has ended"):
        harness.step(Action.wait())
    with pytest.raises(HarnessError, match="episode has ended"):
        harness.oracle()


def test_close_is_idempotent_and_ends_the_episode():
    harness = DesktopHarness()
    harness.reset(seed=0)
    harness.close()
    harness.close()
    with pytest.raises(HarnessError):
        harness.step(Action.wait())


def test_actions_are_checked_against_the_screen(harness):
    harness.reset(seed=0)
    with pytest.raises(ActionError, match=r"\(320, 5\) is outside the 320x240"):
        harness.step(Action.click(320, 5))
    with pytest.raises(ActionError, match=r"\(5, 240\) is outside"):
        harness.step(Action.drag(1, 1, 5, 240))
    with pytest.raises(ActionError, match="expects a vlrl.harness.Action, got str"):
        harness.step("click(3, 4)")


@pytest.mark.parametrize("task", DesktopHarness.tasks)
def test_done_at_once_gives_nothing(harness, task):
    harness.reset(seed=1, options={"task": task})
    _, reward, terminated, truncated, info = harness.step(Action.done())
    assert (reward, terminated, truncated, info["success"]) == (0.0, True, False, False)


def test_fail_terminates_without_reward(harness):
    harness.reset(seed=2, options={"task": "click-target"})
    _, reward, terminated, _, info = harness.step(Action.fail("stuck"))
    assert (reward, terminated, info["success"]) == (0.0, True, False)


def test_episodes_truncate_at_max_steps():
    harness = DesktopHarness(max_steps=3)
    harness.reset(seed=0, options={"task": "fill-form"})
    results = [harness.step(Action.wait())[1:4] for _ in range(3)]
    assert results == [(0.0, False, False), (0.0, False, False), (0.0, False, True)]
    with pytest.raises(HarnessError):
        harness.step(Action.wait())


def test_info_reports_task_success_and_hit(harness):
    obs, info = harness.reset(seed=4, options={"task": "click-target"})
    assert info == {"task": "click-target", "success": False}
    target = harness.episode.target
    _, reward, terminated, _, info = harness.step(harness.oracle())
    assert info["hit"] == f"button:{target.label}"
    assert (reward, terminated, info["success"], info["task"]) == (1.0, True, True, "click-target")
