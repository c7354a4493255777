"""Small fixtures for desktop harness tests."""

from __future__ import annotations

import pytest

from harnesses.desktop import DesktopHarness
from harnesses.desktop.geometry import Rect
from harnesses.desktop.scene import Scene
from harnesses.desktop.style import THEMES, Metrics
from harnesses.desktop.widgets import Window


@pytest.fixture(scope="module")
def harness():
    instance = DesktopHarness()
    yield instance
    instance.close()


@pytest.fixture
def scene() -> Scene:
    """An empty 320x240 desktop."""
    return Scene(320, 240, Metrics.for_screen(320, 240), THEMES[0], "12:00")


@pytest.fixture
def window(scene: Scene) -> Window:
    """One window covering most of the screen, for widgets to go in."""
    window = Window("App", Rect(10, 10, 300, 200), scene.metrics.title)
    scene.windows.append(window)
    return window
