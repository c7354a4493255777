"""The task families, by name."""

from harnesses.desktop.tasks.base import Task
from harnesses.desktop.tasks.click_target import ClickTarget
from harnesses.desktop.tasks.close_dialog import CloseDialog
from harnesses.desktop.tasks.double_click_icon import DoubleClickIcon
from harnesses.desktop.tasks.drag_slider import DragSlider
from harnesses.desktop.tasks.fill_form import FillForm
from harnesses.desktop.tasks.right_click_menu import RightClickMenu
from harnesses.desktop.tasks.scroll_find import ScrollFind
from harnesses.desktop.tasks.select_menu import SelectMenu
from harnesses.desktop.tasks.tick_boxes import TickBoxes
from harnesses.desktop.tasks.type_field import TypeField

FAMILIES: dict[str, type[Task]] = {
    family.name: family
    for family in (
        ClickTarget, TypeField, SelectMenu, TickBoxes, DragSlider, CloseDialog, ScrollFind, FillForm,
        DoubleClickIcon, RightClickMenu,
    )
}  # fmt: skip
"""Simplest first: ``click-target`` is solved by one click, ``fill-form`` takes six steps."""

__all__ = ["FAMILIES", "Task"]
