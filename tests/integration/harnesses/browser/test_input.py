"""Typed actions reach the page as the mouse and keyboard events they name."""

from __future__ import annotations

import pytest

from harnesses.browser import driver
from harnesses.browser.harness import CHROMIUM_ARGS
from harnesses.browser.input import DRAG_STEPS, PLAYWRIGHT_KEYS, WHEEL_PX, perform
from vlrl.harness import NAMED_KEYS, Action

# Every event the page sees, as one short line each. A block, not top-level consts: set_content
# rewrites the same document, whose global scope outlives each rewrite.
RECORDER = """
<textarea id="text" style="width: 300px; height: 60px"></textarea>
<div style="height: 3000px"></div>
<script>
{
  window.events = [];
  const log = (line) => window.events.push(line);
  for (const type of ["mousedown", "mouseup", "click", "dblclick", "contextmenu"]) {
    document.addEventListener(type, (e) => log(`${type} ${e.button} ${e.clientX},${e.clientY}`));
  }
  document.addEventListener("mousemove", (e) => log(`mousemove ${e.clientX},${e.clientY}`));
  document.addEventListener("wheel", (e) => log(`wheel ${e.deltaX},${e.deltaY}`));
  document.addEventListener("keydown", (e) => log(`keydown ${e.key}${e.ctrlKey ? " ctrl" : ""}`));
}
</script>
"""


@pytest.fixture(scope="module")
def page():
    playwright = driver.acquire()
    browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=list(CHROMIUM_ARGS))
    page = browser.new_page(viewport={"width": 640, "height": 480})
    yield page
    browser.close()
    driver.release()


@pytest.fixture
def events(page):
    page.set_content(RECORDER)
    page.mouse.move(0, 0)

    def since(action: Action) -> list[str]:
        page.evaluate("window.events = []")
        perform(page, action)
        return page.evaluate("window.events")

    return since


def test_every_vlrl_key_name_has_a_playwright_key():
    assert set(PLAYWRIGHT_KEYS) == NAMED_KEYS


def test_clicks(events):
    assert events(Action.click(50, 200)) == ["mousemove 50,200", "mousedown 0 50,200", "mouseup 0 50,200", "click 0 50,200"]
    assert "dblclick 0 60,210" in events(Action.double_click(60, 210))
    assert "contextmenu 2 70,220" in events(Action.right_click(70, 220))


def test_move_and_drag(events):
    assert events(Action.move(30, 40)) == ["mousemove 30,40"]
    dragged = events(Action.drag(10, 300, 110, 310))
    assert dragged[:2] == ["mousemove 10,300", "mousedown 0 10,300"]
    moves = dragged[2 : dragged.index("mouseup 0 110,310")]
    assert len(moves) == DRAG_STEPS and moves[-1] == "mousemove 110,310"  # a motion, not a jump


def test_scroll_is_whole_wheel_notches(events, page):
    assert events(Action.scroll(100, 300, down=3)) == ["mousemove 100,300", f"wheel 0,{3 * WHEEL_PX}"]
    assert page.evaluate("window.scrollY") == 3 * WHEEL_PX


def test_typing_and_key_chords(events, page):
    page.click("#text")
    events(Action.type("hello wörld"))
    assert events(Action.key("ctrl", "a")) == ["keydown Control ctrl", "keydown a ctrl"]
    events(Action.type("new"))
    events(Action.key("space"))
    events(Action.key("+"))
    events(Action.key("é"))
    assert events(Action.key("enter")) == ["keydown Enter"]
    assert page.input_value("#text") == "new +é\n"
