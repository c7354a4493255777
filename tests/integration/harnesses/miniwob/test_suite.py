"""``suite="all"``: every task page the miniwob package bundles, for evaluation; pages without an
oracle script run with MiniWoB's own reward. The default suite stays the oracle's tasks."""

from __future__ import annotations

from importlib.resources import files

from harnesses.miniwob import DEFAULT_TASKS, MiniWoBHarness
from harnesses.miniwob.actions import to_screen
from harnesses.miniwob.oracle import POLICIES
from vlrl.harness import Action


def bundled_pages() -> set[str]:
    """The task pages in the installed package, read from its files."""
    folder = files("miniwob") / "html" / "miniwob"
    return {entry.name.removesuffix(".html") for entry in folder.iterdir() if entry.name.endswith(".html")}


def elements(root):
    yield root
    for child in root.children:
        yield from elements(child)


def test_the_default_suite_is_the_oracle_tasks(harness):
    assert harness.tasks == DEFAULT_TASKS and set(harness.tasks) == set(POLICIES)


def test_the_all_suite_runs_every_bundled_page_with_miniwobs_reward():
    pages = bundled_pages()
    assert len(pages) >= 125 and "click-test-2" in pages and "click-test-2" not in POLICIES
    harness = MiniWoBHarness(suite="all", scale=1)
    try:
        assert set(harness.tasks) == pages and len(harness.tasks) == len(pages)
        # click-test-2 has no oracle script: "Click button ONE." beside a button TWO.
        obs, info = harness.reset(seed=0, options={"task": "click-test-2"})
        assert info["task"] == "click-test-2" and harness.oracle() is None
        target = obs.goal.removeprefix("Click button ").removesuffix(".")
        button = next(e for e in elements(harness.browser.dom()) if e.tag == "button" and e.text == target)
        x, y = to_screen(int(button.left + button.width / 2), int(button.top + button.height / 2), 1)
        _, reward, terminated, _, info = harness.step(Action.click(x, y))
        assert terminated and info["success"] and info["raw_reward"] == 1.0 and 0 < reward <= 1.0
        # The natural-language email pages state their goal as {utterance, fields}: read as text.
        obs, _ = harness.reset(seed=0, options={"task": "email-inbox-nl-turk"})
        assert isinstance(obs.goal, str) and obs.goal and harness.oracle() is None
        _, reward, terminated, _, info = harness.step(Action.done())
        assert terminated and reward == -1.0 and not info["success"]
    finally:
        harness.close()
