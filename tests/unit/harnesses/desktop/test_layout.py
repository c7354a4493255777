"""Every layout fits its screen: windows in the work area, widgets inside their windows and apart,
at the smallest, the default and a wide screen, with no and with the most decoys."""

from __future__ import annotations

import pytest

from harnesses.desktop import DesktopHarness
from harnesses.desktop.geometry import Rect


def inside(inner: Rect, outer: Rect) -> bool:
    return outer.x <= inner.x and outer.y <= inner.y and inner.right <= outer.right and inner.bottom <= outer.bottom


def overlap(a: Rect, b: Rect) -> bool:
    return a.x < b.right and b.x < a.right and a.y < b.bottom and b.y < a.bottom


@pytest.mark.parametrize("size", [(160, 120), (320, 240), (960, 240)])
@pytest.mark.parametrize("distractors", [0, 5])
def test_layouts_fit_the_screen(size, distractors):
    harness = DesktopHarness(width=size[0], height=size[1], distractors=distractors)
    for task in harness.tasks:
        for seed in range(6):
            harness.reset(seed=seed, options={"task": task})
            scene = harness.episode.scene
            where = f"{task} seed {seed}"
            for window in scene.windows:
                assert inside(window.rect, scene.work), where
                for i, widget in enumerate(window.widgets):
                    assert inside(widget.rect, window.rect if widget.kind == "menu" else window.body), where
                    assert not any(overlap(widget.rect, other.rect) for other in window.widgets[i + 1 :]), where
            for i, icon in enumerate(scene.icons):
                assert inside(icon.rect, scene.work), where
                assert not any(overlap(icon.rect, other.rect) for other in scene.icons[i + 1 :]), where


def test_text_scales_with_the_screen():
    sizes = []
    for width, height in ((160, 120), (320, 240), (1280, 960)):
        harness = DesktopHarness(width=width, height=height)
        harness.reset(seed=0)
        sizes.append(harness.episode.scene.metrics.f)
    assert sizes == sorted(set(sizes))
