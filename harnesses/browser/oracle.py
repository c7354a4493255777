"""Scripted policies that solve each task family by reading the live page.

Each call looks at the page as it is now (what is open, focused, filled in) and returns one
action, in screenshot pixels, as an agent would: click the centre of the element it needs,
scrolling it into view first; fill a field by clicking it, selecting what is there and typing.
Once its plan has run through without solving the episode (someone else acted on the page),
the policy answers ``done``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from playwright.sync_api import Locator, Page

from harnesses.browser.input import WHEEL_PX
from vlrl.harness import Action, HarnessError

_FIELD = """e => ({
  value: e.value,
  focused: document.activeElement === e,
  selected: e.selectionStart === 0 && e.selectionEnd === e.value.length,
})"""
_HIT = "(e, [x, y]) => e.contains(document.elementFromPoint(x, y))"


class Screen:
    """Pixel targets on a page of ``width`` x ``height``."""

    def __init__(self, page: Page, width: int, height: int) -> None:
        self.page, self.width, self.height = page, width, height

    def shown(self, locator: Locator) -> bool:
        return locator.count() == 1 and locator.is_visible()

    def click(self, locator: Locator) -> Action:
        """Click the element's centre, or scroll towards it when something else is there: sideways
        too when it is beside the screen (a page wider than a narrow screen)."""
        box = locator.bounding_box() if locator.count() == 1 else None
        if box is None:
            raise HarnessError(f"oracle: {locator} is not one visible element of the page")
        x, y = round(box["x"] + box["width"] / 2), round(box["y"] + box["height"] / 2)
        if 0 <= x < self.width and 0 <= y < self.height and locator.evaluate(_HIT, [x, y]):
            return Action.click(x, y)
        right = 0 if 0 <= x < self.width else _notches(x - self.width / 2)
        down = 0 if right and 0 <= y < self.height else _notches(y - self.height / 2)
        return Action.scroll(self.width // 2, self.height // 2, down=down, right=right)

    def fill(self, locator: Locator, value: str) -> Action | None:
        """The next action towards ``value`` in a text field; None once it holds it."""
        field = locator.evaluate(_FIELD)
        if field["value"] == value:
            return None
        if not field["focused"]:
            return self.click(locator)
        if not field["selected"]:
            return Action.key("ctrl", "a")
        return Action.type(value)


def _notches(offset_px: float) -> int:
    """Whole wheel notches that bring a point ``offset_px`` from mid-screen there: at least one,
    at most an action's 50."""
    offset = offset_px / WHEEL_PX
    return min(50, max(1, math.ceil(offset))) if offset >= 0 else max(-50, math.floor(offset))


def form_fill(screen: Screen, args: Mapping[str, Any]) -> Action:
    page = screen.page
    if not screen.shown(page.locator("#form")):
        return Action.done()
    for selector, value in (("#name", args["name"]), ("#email", args["email"])):
        if action := screen.fill(page.locator(selector), value):
            return action
    if page.locator("#choice .value").inner_text() != args["choice"]:
        option = page.get_by_role("option", name=args["choice"], exact=True)
        return screen.click(option if screen.shown(option) else page.locator("#choice"))
    if page.locator("#updates").is_checked() != args["updates"]:
        return screen.click(page.locator("#updates"))
    return screen.click(page.locator("#submit"))


def todo_manage(screen: Screen, args: Mapping[str, Any]) -> Action:
    page = screen.page

    def row(text: str) -> Locator:
        return page.locator("li", has=page.get_by_text(text, exact=True))

    if not row(args["add"]).count():
        return screen.fill(page.locator("#new-todo"), args["add"]) or screen.click(
            page.get_by_role("button", name="Add", exact=True)
        )
    if not row(args["finish"]).get_by_role("checkbox").is_checked():
        return screen.click(row(args["finish"]).get_by_role("checkbox"))
    if not row(args["remove"]).count():
        return Action.done()
    return screen.click(row(args["remove"]).get_by_role("button", name="Delete"))


def email_triage(screen: Screen, args: Mapping[str, Any]) -> Action:
    page = screen.page
    if screen.shown(page.locator(".notice")):  # "Moved to ..." or "Reply sent."
        return Action.done()
    header = page.get_by_text(f"From: {args['sender']} <")
    if not screen.shown(header):
        back = page.get_by_role("button", name="← Back")
        if screen.shown(back):
            return screen.click(back)
        row = page.locator(".row", has=page.get_by_text(args["sender"], exact=True))
        return screen.click(row if screen.shown(row) else page.locator("nav button", has_text="Inbox"))
    if args["action"] == "star":
        star = page.locator("#star")
        return Action.done() if star.get_attribute("aria-pressed") == "true" else screen.click(star)
    if args["action"] == "move":
        item = page.get_by_role("menuitem", name=args["folder"], exact=True)
        return screen.click(item if screen.shown(item) else page.get_by_role("button", name="Move to ▾"))
    reply = page.get_by_role("textbox", name="Reply")
    if not screen.shown(reply):
        return screen.click(page.get_by_role("button", name="Reply", exact=True))
    return screen.fill(reply, args["reply"]) or screen.click(page.get_by_role("button", name="Send", exact=True))


def shop_checkout(screen: Screen, args: Mapping[str, Any]) -> Action:
    page = screen.page
    view = page.locator("body").get_attribute("data-view")
    if view == "placed":
        return Action.done()
    if view == "catalog":
        if page.locator("#cart-button").inner_text() == "Cart (0)":
            card = page.locator(".product", has=page.get_by_text(args["product"], exact=True))
            return screen.click(card.get_by_role("button", name="Add to cart"))
        return screen.click(page.locator("#cart-button"))
    if view == "cart":
        qty = page.get_by_label(f"Quantity of {args['product']}")
        return screen.fill(qty, str(args["qty"])) or screen.click(page.get_by_role("button", name="Checkout"))
    for selector, value in (("#ship-name", args["name"]), ("#ship-address", args["address"])):
        if action := screen.fill(page.locator(selector), value):
            return action
    return screen.click(page.get_by_role("button", name="Place order"))


POLICIES: Mapping[str, Callable[[Screen, Mapping[str, Any]], Action]] = {
    "form-fill": form_fill,
    "todo-manage": todo_manage,
    "email-triage": email_triage,
    "shop-checkout": shop_checkout,
}
