"""Episode order, limits, task switching, threads, and closing without orphan processes."""

from __future__ import annotations

import gc
import os
import signal
import threading
from pathlib import Path

import pytest

from harnesses.miniwob import MiniWoBHarness
from vlrl.harness import Action, HarnessError


def live(pids: set[int]) -> set[int]:
    """The pids of ``pids`` still running, read from /proc (an exited, unreaped zombie is not)."""
    running = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            running.add(pid)
    return running


def descendants(root: int) -> set[int]:
    """``root`` and every process below it in the parent tree, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        found.add(pid := todo.pop())
        todo.extend(children.get(pid, []))
    return found


def test_close_ends_every_process_and_is_idempotent():
    harness = MiniWoBHarness(tasks=("click-test",))
    with pytest.raises(HarnessError, match="before reset"):
        harness.step(Action.wait())
    harness.reset(seed=0)
    tree = descendants(harness.browser.driver_pid)
    owned = harness.browser.processes()
    assert len(owned) >= 3 and live(tree - owned) == set()  # ChromeDriver, the browser, its helpers
    harness.close()
    harness.close()
    assert live(owned | tree) == set() and harness.browser.processes() == set()
    with pytest.raises(HarnessError, match="before reset"):
        harness.step(Action.wait())


def test_a_dropped_harness_still_ends_its_processes():
    harness = MiniWoBHarness(tasks=("click-test",))
    owned = harness.browser.processes()
    del harness
    gc.collect()
    assert owned and live(owned) == set()


def test_switching_task_keeps_the_same_chromium(harness):
    harness.reset(seed=0, options={"task": "click-test"})
    session, driver_pid = harness.browser.driver.session_id, harness.browser.driver_pid
    obs, info = harness.reset(seed=0, options={"task": "login-user"})
    assert info["task"] == "login-user" and "username" in obs.goal
    assert (harness.browser.driver.session_id, harness.browser.driver_pid) == (session, driver_pid)


def test_same_seed_same_episode_whatever_came_before(harness):
    """Focus and the mouse position outlive an episode on the page; reset must not show them."""
    first, info = harness.reset(seed=5, options={"task": "enter-text"})
    harness.step(harness.oracle())  # focuses the text field
    harness.step(Action.type("x"))
    submit = next(e for e in harness.browser.dom().subtree_elements if e.id == "subbtn")
    s = harness.config.scale
    harness.step(Action.move(int(submit.left + 3) * s, int(submit.top + 3) * s))  # hover the button
    again, info_again = harness.reset(seed=5, options={"task": "enter-text"})
    assert info == info_again and first.goal == again.goal
    assert (first.screenshot == again.screenshot).all()


def test_step_limit_truncates_and_ends_the_episode():
    harness = MiniWoBHarness(tasks=("click-test",), max_steps=2)
    try:
        harness.reset(seed=0)
        _, _, terminated, truncated, _ = harness.step(Action.move(1, 1))
        assert not terminated and not truncated
        _, reward, terminated, truncated, info = harness.step(Action.move(2, 2))
        assert truncated and not terminated and reward == 0.0 and info["steps"] == 2
        with pytest.raises(HarnessError, match="after the episode ended"):
            harness.step(Action.wait())
    finally:
        harness.close()


def test_miniwob_clock_ends_a_slow_episode_with_minus_one():
    harness = MiniWoBHarness(tasks=("click-test",), time_limit_s=0.3)
    try:
        _, info = harness.reset(seed=0)
        assert info["time_limit_s"] == pytest.approx(0.3)
        _, reward, terminated, truncated, info = harness.step(Action.wait(0.5))
        assert terminated and not truncated and reward == -1.0
        assert info == {"task": "click-test", "steps": 1, "raw_reward": -1.0, "success": False, "reason": "timed out"}
    finally:
        harness.close()


@pytest.mark.parametrize("kind", ["done", "fail"])
def test_done_or_fail_before_the_page_ends_counts_as_a_timeout(harness, kind):
    harness.reset(seed=0, options={"task": "click-test"})
    _, reward, terminated, _, info = harness.step(Action(kind=kind))
    assert terminated and reward == -1.0 and not info["success"] and info["reason"] == f"agent said {kind}"


def test_bad_reset_arguments_name_the_problem(harness):
    with pytest.raises(HarnessError, match="'colour'"):
        harness.reset(seed=0, options={"colour": "red"})
    with pytest.raises(HarnessError, match="seed='7'"):
        harness.reset(seed="7")
    with pytest.raises(HarnessError, match="'click-tab' is not one of"):
        harness.reset(seed=0, options={"task": "click-tab"})
    with pytest.raises(HarnessError, match="before reset"):  # a failed reset leaves no episode
        harness.step(Action.wait())


def test_any_thread_may_drive_an_instance(harness):
    """Not thread-bound: reset on one thread, step on another, as an env host's worker threads do."""
    results = []

    def run(call):
        thread = threading.Thread(target=lambda: results.append(call()))
        thread.start()
        thread.join()

    run(lambda: harness.reset(seed=0, options={"task": "click-test"}))
    run(lambda: harness.step(harness.oracle()))
    assert results[1][2] and results[1][1] > 0


def test_close_after_chromedriver_died_still_ends_chromium():
    harness = MiniWoBHarness(tasks=("click-test",))
    owned = harness.browser.processes()
    os.kill(harness.browser.driver_pid, signal.SIGKILL)
    assert live(owned - {harness.browser.driver_pid})  # Chromium outlives its driver
    harness.close()
    assert len(owned) >= 3 and live(owned) == set()
