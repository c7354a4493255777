"""The ``gymnasium`` harness codebase: any Gymnasium env whose observations are images (or that
renders ``rgb_array`` frames) as a vlrl harness, its actions mapped from vlrl's typed ones."""

from harnesses.gymnasium.harness import GymnasiumHarness

__all__ = ["GymnasiumHarness"]
