"""The desktop's elements are the labelled things a click at their centre reaches, topmost only."""

from __future__ import annotations

import pytest

from harnesses.desktop import DesktopHarness
from harnesses.desktop.elements import elements
from harnesses.desktop.geometry import Rect
from harnesses.desktop.scene import Popup
from harnesses.desktop.widgets import Button, Menu, Window

FAMILIES = DesktopHarness.tasks


def _label_at(scene, x, y):
    hit = scene.hit_test(x, y)
    if isinstance(hit, Popup):
        return hit.item_at(x, y)
    if hasattr(hit, "row_rect"):  # a list box: the row under the point
        return hit.items[hit.offset + (y - hit.rect.y) // hit.row_h]
    return getattr(hit, "label", None)


@pytest.mark.parametrize("task", FAMILIES)
def test_every_element_is_what_a_click_at_its_centre_reaches(task):
    harness = DesktopHarness(width=320, height=240, tasks=[task], distractors=2)
    for seed in range(10):
        obs, _ = harness.reset(seed=seed)
        for _ in range(3):  # the first screens of the oracle's path: popups and scrolled lists included
            for element in obs.elements:
                assert _label_at(harness.episode.scene, *element.center) == element.label
            obs, _, terminated, truncated, _ = harness.step(harness.oracle())
            if terminated or truncated:
                break


def test_a_window_in_front_and_an_open_popup_hide_what_they_cover(scene, window):
    m = scene.metrics
    window.add(Button("Behind", Rect(20, 60, 40, m.row)))
    window.add(Button("Visible", Rect(200, 60, 40, m.row)))
    front = Window("Front", Rect(10, 40, 100, 60), m.title)
    front.add(Button("Front", Rect(60, 70, 40, m.row)))
    scene.windows.append(front)
    menu = window.add(Menu("File", Rect(150, 30, 30, m.row), ("New", "Open")))
    assert [e.label for e in elements(scene)] == ["Visible", "File", "Front"]
    scene.open_popup(menu, 190, 55)  # over "Visible"
    assert [e.label for e in elements(scene)] == ["New", "Open", "File", "Front"]
