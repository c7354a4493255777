"""Scripted MiniWoB policies that read the DOM: demonstrations and tests, never RL.

A policy maps the utterance and the page's DOM to the next action in page pixels (CSS pixels of
the 160x210 task area), or None in a state it does not know. Policies keep no state: the DOM says
how far the episode got (a field's value, a box's check mark), so any prefix of a policy's own
plan is picked up where it stopped. Targets are read from the utterance with MiniWoB's own field
extractors, so the parsing is the package's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from miniwob.dom import DOMElement
from miniwob.fields import get_field_extractor

from vlrl.harness import Action

Policy = Callable[[str, DOMElement], Action | None]


def _elements(root: DOMElement) -> Iterator[DOMElement]:
    yield root
    for child in root.children:
        yield from _elements(child)


def _find(root: DOMElement, test: Callable[[DOMElement], bool]) -> DOMElement | None:
    return next((element for element in _elements(root) if test(element)), None)


def _by_id(root: DOMElement, element_id: str) -> DOMElement | None:
    return _find(root, lambda element: element.id == element_id)


def _click(element: DOMElement | None) -> Action | None:
    """A click at the element's centre, rounded down to the page pixel it falls in."""
    if element is None:
        return None
    return Action.click(max(0, int(element.left + element.width / 2)), max(0, int(element.top + element.height / 2)))


def _fill(field: DOMElement | None, text: str) -> Action | None:
    """The next step of typing ``text`` into a text field: focus, fix a wrong ending, type the rest.
    None once the field holds ``text``."""
    if field is None or field.value == text:
        return None
    if not field.focused:
        return _click(field)
    if text.startswith(field.value):
        return Action.type(text[len(field.value) :])
    return Action.key("backspace")


def _fields(task: str, utterance: str) -> dict[str, str]:
    return dict(get_field_extractor(task)(utterance))


def click_test(utterance: str, root: DOMElement) -> Action | None:
    return _click(_by_id(root, "subbtn"))


def click_button(utterance: str, root: DOMElement) -> Action | None:
    target = _fields("click-button", utterance)["target"]
    return _click(_find(root, lambda e: e.tag == "button" and e.text == target))


def click_link(utterance: str, root: DOMElement) -> Action | None:
    target = _fields("click-link", utterance)["target"]
    return _click(_find(root, lambda e: "alink" in e.classes.split() and e.text == target))


def click_dialog(utterance: str, root: DOMElement) -> Action | None:
    return _click(_find(root, lambda e: "ui-dialog-titlebar-close" in e.classes.split()))


def focus_text(utterance: str, root: DOMElement) -> Action | None:
    return _click(_by_id(root, "tt"))


def enter_text(utterance: str, root: DOMElement) -> Action | None:
    target = _fields("enter-text", utterance)["target"]
    return _fill(_by_id(root, "tt"), target) or _click(_by_id(root, "subbtn"))


def login_user(utterance: str, root: DOMElement) -> Action | None:
    fields = _fields("login-user", utterance)
    return (
        _fill(_by_id(root, "username"), fields["username"])
        or _fill(_by_id(root, "password"), fields["password"])
        or _click(_by_id(root, "subbtn"))
    )


def click_checkboxes(utterance: str, root: DOMElement) -> Action | None:
    wanted = {value for key, value in _fields("click-checkboxes", utterance).items() if key.startswith("target")}
    for box in _elements(root):
        if box.tag != "input_checkbox" or box.parent is None:
            continue
        # <label><input type=checkbox>NAME</label>: the name is the label's text beside the box.
        name = " ".join(sibling.text for sibling in box.parent.children if sibling.tag == "t")
        if box.value != (name in wanted):
            return _click(box)
    return _click(_by_id(root, "subbtn"))


POLICIES: dict[str, Policy] = {
    "click-test": click_test,
    "click-button": click_button,
    "click-link": click_link,
    "click-dialog": click_dialog,
    "focus-text": focus_text,
    "enter-text": enter_text,
    "login-user": login_user,
    "click-checkboxes": click_checkboxes,
}
"""The tasks the oracle solves, by MiniWoB task name."""
