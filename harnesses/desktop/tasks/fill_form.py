"""fill-form: type a name and an email, tick the named box (and only it), then press Submit.

Submit (also the enter key) closes the form, so the reward is decided by the state it was sent in.
"""

from __future__ import annotations

import random

from vlrl.harness import Action

from harnesses.desktop.geometry import Rect
from harnesses.desktop.layout import centred, decoys, place_window
from harnesses.desktop.tasks.base import Task, click, click_box, fill
from harnesses.desktop.widgets import Button, Checkbox, Label, TextField
from harnesses.desktop.words import CONSENTS, DOMAINS, FIRST_NAMES, FORMS, LAST_NAMES


class FillForm(Task):
    name = "fill-form"

    def build(self, rng: random.Random, distractors: int) -> str:
        m = self.scene.metrics
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        self.values = {"Name": f"{first} {last}", "Email": f"{first.lower()}@{rng.choice(DOMAINS)}"}
        consents = rng.sample(CONSENTS, 1 + decoys(rng, distractors, 0, 2))
        caption_w = max(m.text_w(f"{label}:") for label in self.values)
        field_w = 12 * m.f
        buttons_w = m.text_w("Submit") + m.text_w("Cancel") + 4 * m.f + m.gap
        w = max(caption_w + m.gap + field_w, buttons_w, max(m.text_w(c) for c in consents) + m.box + m.gap)
        h = 2 * (m.row + m.gap) + len(consents) * m.row + m.gap + m.row
        window = place_window(rng, self.scene, rng.choice(FORMS), w, h)
        x, y = centred(window, w, h)
        self.fields: dict[str, TextField] = {}
        for label in self.values:
            window.add(Label(f"{label}:", Rect(x, y, caption_w, m.row)))
            self.fields[label] = window.add(TextField(label, Rect(x + caption_w + m.gap, y, field_w, m.row)))
            y += m.row + m.gap
        self.boxes = []
        for label in consents:
            self.boxes.append(window.add(Checkbox(label, Rect(x, y, m.box + m.gap + m.text_w(label), m.row))))
            y += m.row
        self.consent = rng.choice(self.boxes)
        for box in self.boxes:
            box.checked = box is not self.consent and rng.random() < 0.3
        right, y = x + w, y + m.gap
        for label in ("Cancel", "Submit"):
            bw = m.text_w(label) + 2 * m.f
            button = window.add(Button(label, Rect(right - bw, y, bw, m.row), closes=True))
            right -= bw + m.gap
        self.submit = window.default = button
        name, email = self.values["Name"], self.values["Email"]
        return f'Fill in the form: name "{name}", email "{email}", tick only "{self.consent.label}", then click Submit.'

    def _ready(self) -> bool:
        return all(self.fields[k].text == v for k, v in self.values.items()) and all(
            box.checked == (box is self.consent) for box in self.boxes
        )

    def solved(self) -> bool:
        return self.submit.presses > 0 and self._ready()

    def oracle(self) -> Action:
        for label, value in self.values.items():
            step = fill(self.scene, self.fields[label], value)
            if step is not None:
                return step
        wrong = next((box for box in self.boxes if box.checked != (box is self.consent)), None)
        return click(self.submit) if wrong is None else click_box(wrong)
