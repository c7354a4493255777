"""The shared harness contract, and building the harness the ways a run does."""

from __future__ import annotations


from harnesses.miniwob import MiniWoBHarness
from vlrl.harness import check_harness, make


def test_miniwob_passes_the_harness_contract():
    check_harness(MiniWoBHarness)


def test_make_and_config_build_give_a_working_harness():
    for harness in (make("miniwob", tasks=("click-test",), scale=3), MiniWoBHarness.Config(max_steps=4).build()):
        try:
            obs, info = harness.reset(seed=0)
            assert isinstance(harness, MiniWoBHarness) and not harness.thread_bound
            assert obs.screenshot.shape == (210 * harness.config.scale, 160 * harness.config.scale, 3)
            assert info["task"] in harness.tasks and obs.goal
        finally:
            harness.close()
