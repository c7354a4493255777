"""Actions do to widgets what a desktop toolkit would, and report what they hit."""

from __future__ import annotations

from harnesses.desktop.geometry import Rect
from harnesses.desktop.interaction import apply
from harnesses.desktop.widgets import Button, Checkbox, Icon, ListBox, Menu, Slider, TextField, Window
from vlrl.harness import Action


def test_typing_goes_to_the_focused_field(scene, window):
    name = window.add(TextField("Name", Rect(20, 40, 120, 20)))
    email = window.add(TextField("Email", Rect(20, 70, 120, 20)))
    assert apply(scene, Action.type("lost")) is None  # no focus yet
    assert apply(scene, Action.click(30, 45)) == "field:Name"
    assert apply(scene, Action.type("Adx")) == "field:Name"
    apply(scene, Action.key("backspace"))
    apply(scene, Action.key("a"))
    apply(scene, Action.key("tab"))
    apply(scene, Action.type("ada@x.io"))
    assert (name.text, email.text, scene.focus) == ("Ada", "ada@x.io", email)


def test_select_all_then_type_replaces_and_backspace_clears(scene, window):
    field = window.add(TextField("Name", Rect(20, 40, 120, 20), text="wrong"))
    apply(scene, Action.click(30, 45))
    apply(scene, Action.key("ctrl", "a"))
    apply(scene, Action.type("right"))
    assert field.text == "right"
    apply(scene, Action.key("ctrl", "a"))
    apply(scene, Action.key("backspace"))
    assert field.text == ""


def test_enter_presses_the_default_button_which_closes_the_window(scene, window):
    window.add(TextField("Name", Rect(20, 40, 120, 20)))
    window.default = window.add(Button("Submit", Rect(20, 70, 60, 20), closes=True))
    apply(scene, Action.click(30, 45))
    apply(scene, Action.type("Bo\nlost"))
    assert window.closed_by == "button:Submit" and scene.focus is None
    assert scene.hit_test(30, 45) is None  # a closed window is gone


def test_close_button_closes_its_window(scene, window):
    assert apply(scene, Action.click(*window.close.rect.center)) == "close:App"
    assert window.closed_by == "close:App"


def test_checkbox_toggles_from_box_or_caption(scene, window):
    box = window.add(Checkbox("Sync", Rect(20, 40, 80, 20)))
    assert apply(scene, Action.click(22, 50)) == "checkbox:Sync" and box.checked
    apply(scene, Action.click(90, 50))
    assert not box.checked


def test_slider_drags_from_anywhere_on_its_track_and_clicks_jump(scene, window):
    slider = window.add(Slider("Volume", Rect(20, 40, 101, 20), value=10))
    assert apply(scene, Action.drag(slider.x_of(10), 50, 90, 50)) == "slider:Volume"
    assert slider.value == 70
    apply(scene, Action.click(45, 50))
    assert slider.value == 25
    apply(scene, Action.drag(200, 150, 20, 50))  # starting off the slider does nothing
    assert slider.value == 25


def test_menu_drops_down_and_a_click_outside_only_closes_it(scene, window):
    menu = window.add(Menu("Edit", Rect(12, 30, 40, 20), ("Cut", "Copy", "Paste")))
    button = window.add(Button("Go", Rect(200, 150, 40, 20)))
    apply(scene, Action.click(20, 35))
    assert scene.popup is not None and scene.popup.rect.y == menu.rect.bottom
    assert apply(scene, Action.click(210, 155)) is None
    assert scene.popup is None and button.presses == 0
    apply(scene, Action.click(20, 35))
    assert apply(scene, Action.click(*scene.popup.item_rect("Paste").center)) == "menu-item:Paste"
    assert menu.chosen == "Paste" and scene.popup is None
    apply(scene, Action.click(20, 35))
    assert apply(scene, Action.scroll(20, scene.popup.rect.y + 2, down=1)) == "menu-item:Cut"
    apply(scene, Action.key("escape"))
    assert scene.popup is None and menu.chosen == "Paste"


def test_icons_select_open_and_show_a_context_menu(scene):
    doc = Icon("todo.txt", Rect(250, 150, 50, 50), glyph="doc", menu=("Open", "Delete"))
    app = Icon("Mail", Rect(10, 10, 50, 50))
    scene.icons += [doc, app]
    apply(scene, Action.click(30, 30))
    assert app.selected and not app.opened
    apply(scene, Action.key("enter"))
    assert app.opened
    assert apply(scene, Action.double_click(270, 170)) == "icon:todo.txt" and doc.opened and not app.selected
    apply(scene, Action.right_click(290, 190))
    popup = scene.popup
    assert popup.owner is doc and popup.rect.right <= 320 and popup.rect.bottom <= 240  # kept on screen
    apply(scene, Action.click(*popup.item_rect("Delete").center))
    assert doc.chosen == "Delete"
    assert apply(scene, Action.right_click(150, 100)) is None and scene.popup is None


def test_list_scrolls_by_wheel_and_arrows_and_clicks_rows(scene, window):
    items = tuple(f"Item {i:02d}" for i in range(10))
    box = window.add(ListBox("Things", Rect(20, 40, 110, 80), items, rows=4, bar=10))
    assert apply(scene, Action.scroll(50, 60, down=20)) == "list:Things"
    assert box.offset == box.max_offset == 6
    apply(scene, Action.click(125, 45))  # the up arrow
    assert box.offset == 5 and box.visible("Item 05") and not box.visible("Item 09")
    assert apply(scene, Action.click(*box.row_rect("Item 07").center)) == "item:Item 07"
    assert box.selected == "Item 07"
    assert apply(scene, Action.move(*box.row_rect("Item 06").center)) == "item:Item 06"


def test_topmost_window_takes_the_click(scene, window):
    below = window.add(Button("Below", Rect(100, 100, 60, 20)))
    top = Window("Top", Rect(80, 80, 120, 80), scene.metrics.title)
    scene.windows.append(top)
    assert apply(scene, Action.click(110, 110)) == "window:Top"
    assert below.presses == 0
