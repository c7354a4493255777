"""The ``desktop`` harness codebase: a synthetic desktop of windows, buttons, menus, fields,
checkboxes, sliders, icons and lists drawn with Pillow, with seeded task families whose rewards
are checked from widget state. Fast enough for unit tests and CPU RL of small models."""

from harnesses.desktop.harness import DesktopHarness
from harnesses.desktop.settings import DesktopSettings

__all__ = ["DesktopHarness", "DesktopSettings"]
