"""Actions land on the page pixel the agent saw: the upscale/downscale mapping, key chords, and
each action kind driven through real Chromium."""

from __future__ import annotations

import numpy as np
import pytest

from harnesses.miniwob.actions import key_chord, to_page, to_screen
from vlrl.harness import Action, ActionError


@pytest.mark.parametrize("scale", [1, 2, 3, 4])
def test_every_screen_pixel_maps_to_the_page_pixel_it_shows(scale):
    page = np.arange(160 * 210).reshape(210, 160)  # one id per page pixel
    shown = np.repeat(np.repeat(page, scale, axis=0), scale, axis=1)  # what the agent sees
    for y in range(0, 210 * scale, 7):
        for x in range(0, 160 * scale, 5):
            px, py = to_page(x, y, scale)
            assert shown[y, x] == page[py, px]
    for px, py in [(0, 0), (159, 209), (37, 101)]:
        x, y = to_screen(px, py, scale)
        assert to_page(x, y, scale) == (px, py) and shown[y, x] == page[py, px]


@pytest.mark.parametrize(
    ("keys", "chord"),
    [
        (("enter",), "<Enter>"),
        (("a",), "a"),
        (("ctrl", "a"), "C-a"),
        (("ctrl", "shift", "tab"), "C-S-<Tab>"),
        (("shift",), "<Shift>"),
        (("ctrl", "alt"), "C-<Alt>"),
        (("f5",), "<F5>"),
    ],
)
def test_key_chords_use_miniwob_press_key_syntax(keys, chord):
    assert key_chord(keys) == chord


def test_a_chord_of_two_plain_keys_is_refused():
    with pytest.raises(ActionError, match=r"modifiers plus one key; got the keys \['a', 'b'\]"):
        key_chord(("a", "b"))


def _element(harness, element_id):
    return next(e for e in harness.browser.dom().subtree_elements if e.id == element_id)


def _box(harness, element_id):
    """The page-pixel box [left, right) x [top, bottom) of an element, from the DOM."""
    element = _element(harness, element_id)
    return int(element.left), int(element.right), int(element.top), int(element.bottom)


def _record_events(harness, *types):
    """Make the page log events of ``types``; returns a reader of [type, x, y, button, dx, dy] rows."""
    harness.browser.driver.execute_script(
        "window.seen = []; for (const type of arguments[0]) document.addEventListener(type, e =>"
        " window.seen.push([e.type, e.clientX, e.clientY, e.button, e.deltaX || 0, e.deltaY || 0]), true);",
        list(types),
    )
    return lambda: harness.browser.driver.execute_script("const s = window.seen; window.seen = []; return s;")


def test_screenshot_is_the_task_area_pixel_for_pixel(harness):
    obs, _ = harness.reset(seed=0, options={"task": "click-test"})
    scale = harness.config.scale
    shot = obs.screenshot
    assert shot.shape == (210 * scale, 160 * scale, 3) and shot.dtype == np.uint8
    blocks = shot.reshape(210, scale, 160, scale, 3)
    assert (blocks == blocks[:, :1, :, :1]).all()  # nearest-neighbour upscale: uniform blocks
    # The yellow query bar is page rows 0..49, full width; row 50 is the white task area.
    right = 160 * scale - 1
    assert (shot[: 50 * scale, right] == (255, 255, 0)).all()
    assert (shot[50 * scale, right] == (255, 255, 255)).all()


def test_pointer_events_arrive_at_the_page_pixel_shown(harness):
    """Both corners of a page pixel's block on screen move the real mouse to that page pixel."""
    harness.reset(seed=0, options={"task": "click-test"})
    seen = _record_events(harness, "mousemove")
    s = harness.config.scale
    for px, py in [(0, 0), (159, 209), (80, 25), (3, 170), (141, 99)]:
        for x, y in [(px * s, py * s), (px * s + s - 1, py * s + s - 1)]:
            harness.step(Action.move(x, y))
            assert seen()[-1][1:3] == [px, py], (x, y)


@pytest.mark.parametrize("seed", [0, 1])
def test_clicks_hit_exactly_the_pixels_of_the_element(harness, seed):
    """Click one upscaled pixel outside each edge of the text box (a miss), then its last pixel inside."""
    harness.reset(seed=seed, options={"task": "focus-text"})
    left, right, top, bottom = _box(harness, "tt")
    s = harness.config.scale
    mid_x, mid_y = (left + right) // 2 * s, (top + bottom) // 2 * s
    for x, y in [(left * s - 1, mid_y), (right * s, mid_y), (mid_x, top * s - 1), (mid_x, bottom * s)]:
        _, reward, terminated, _, _ = harness.step(Action.click(x, y))
        assert not terminated and reward == 0.0, (x, y)
    _, reward, terminated, _, info = harness.step(Action.click(right * s - 1, bottom * s - 1))
    assert terminated and reward > 0 and info["success"]


def test_typing_and_key_chords_edit_the_focused_field(harness):
    harness.reset(seed=0, options={"task": "enter-text"})
    left, right, top, bottom = _box(harness, "tt")
    s = harness.config.scale
    harness.step(Action.click((left + 5) * s, (top + bottom) // 2 * s))
    harness.step(Action.type("abc"))
    assert _element(harness, "tt").value == "abc"
    harness.step(Action.key("backspace"))
    assert _element(harness, "tt").value == "ab"
    harness.step(Action.key("ctrl", "a"))
    harness.step(Action.type("Zoe"))
    assert _element(harness, "tt").value == "Zoe"


def test_drag_scroll_and_right_click_reach_the_page_where_aimed(harness):
    """Kinds no default task needs still deliver their events at the mapped page pixels."""
    harness.reset(seed=0, options={"task": "click-test"})
    seen = _record_events(harness, "mousedown", "mouseup", "contextmenu", "wheel")
    s = harness.config.scale
    harness.step(Action.drag(10 * s, 60 * s, 30 * s + 1, 70 * s + 1))
    assert [row[:4] for row in seen()] == [["mousedown", 10, 60, 0], ["mouseup", 30, 70, 0]]
    harness.step(Action.right_click(40 * s, 80 * s))
    assert ["contextmenu", 40, 80, 2] in [row[:4] for row in seen()]
    _, _, terminated, _, _ = harness.step(Action.scroll(5 * s, 100 * s, down=2, right=-1))
    wheel = [row for row in seen() if row[0] == "wheel"]
    assert wheel and wheel[0][1:3] == [5, 100] and not terminated
    assert sum(row[4] for row in wheel) == -50 and sum(row[5] for row in wheel) == 100  # 50 px a notch


def test_a_double_click_is_a_click_to_the_page(harness):
    harness.reset(seed=1, options={"task": "click-test"})
    left, right, top, bottom = _box(harness, "subbtn")
    s = harness.config.scale
    _, reward, terminated, _, info = harness.step(Action.double_click((left + right) * s // 2, (top + bottom) * s // 2))
    assert terminated and reward > 0 and info["success"]


@pytest.mark.parametrize(
    "action",
    [Action.click(320, 0), Action.click(0, 420), Action.drag(1, 1, 400, 1), Action.scroll(0, 999, down=1)],
)
def test_points_outside_the_upscaled_screenshot_are_refused(harness, action):
    harness.reset(seed=0, options={"task": "click-test"})
    with pytest.raises(ActionError, match="outside the 320x420 screenshot"):
        harness.step(action)
    _, _, terminated, _, info = harness.step(Action.wait())  # the refused action did not count
    assert not terminated and info["steps"] == 1
