"""A desktop harness that is not deterministic across resets of one instance: each reset marks
its screen with the instance's reset count, so replaying an episode on the instance that played
it reaches another first screen (what a harness showing the time, or drawing from an unseeded
random source, does). Branching rollouts must count its branches as failed, never train them."""

from __future__ import annotations

from harnesses.desktop import DesktopHarness
from vlrl.harness import Observation


class DriftingDesktop(DesktopHarness):
    def __init__(self, **settings):
        super().__init__(**settings)
        self.resets = 0

    def reset(self, *, seed=None, options=None):
        self.resets += 1
        return super().reset(seed=seed, options=options)

    def _observe(self) -> Observation:
        obs = super()._observe()
        pixels = obs.screenshot.copy()
        pixels[0, : self.resets % pixels.shape[1]] = 0  # a mark as wide as the reset count
        return Observation(screenshot=pixels, goal=obs.goal, elements=obs.elements)
