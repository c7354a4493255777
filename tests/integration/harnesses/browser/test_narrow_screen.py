"""On a screen narrower than an app's layout the oracle scrolls sideways to what it needs (the
checker's 'oracle' rule found it scrolling up and down for ever at 400x300)."""

from __future__ import annotations


from harnesses.browser import BrowserHarness
from tests.helpers.play import play
from vlrl.harness import check_harness


def test_the_oracle_reaches_what_is_beside_a_narrow_screen():
    harness = BrowserHarness(width=400, height=300)
    try:
        for family in ("todo-manage", "shop-checkout"):
            harness.reset(seed=0, options={"task": family})
            transitions = play(harness)
            assert transitions[-1][4]["success"], family
            assert any(action.kind == "scroll" and action.scroll_x > 0 for action, *_ in transitions), family
    finally:
        harness.close()


def test_passes_the_checker_on_a_narrow_screen():
    check_harness(BrowserHarness, settings={"width": 400, "height": 300})
